"""End to end: `gatehouse approve|reject|edit|redraft` in a subprocess, through the
control socket of the real bot (in this process, against the local Bot API server),
recorded as the Unix user that ran them."""

from __future__ import annotations

import asyncio
import os
import pwd
import sys
from pathlib import Path
from typing import Any

from store.audit import events
from store.items.machine import State
from tests.e2e import test_bot_e2e as e2e
from tests.e2e import test_nudges_e2e as live
from tests.fakes.feed_server import FeedServer

feed = live.feed
USER = events.cli(pwd.getpwuid(os.geteuid()).pw_name)


async def gatehouse(tmp_path: Path, *args: str, stdin: bytes = b"") -> tuple[int, str]:
    """The CLI in a subprocess, without blocking the loop the bot runs in."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")},
        "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
        "GATEHOUSE_PIPELINES_DIR": str(tmp_path / "pipelines"),
        "GATEHOUSE_TELEGRAM__OPERATORS": str(e2e.OPERATOR),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args, env=environ, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_decisions_from_a_terminal_name_the_unix_user(
    tmp_path: Path, feed: FeedServer
) -> None:
    async with live.running(tmp_path, feed, "") as bot:
        api, store = bot.api, bot.runtime.store
        first, second = await api.await_for(
            lambda: (found := live.card_texts(api, e2e.OPERATOR))[1:] and found, timeout=60
        )
        item_a, item_b = e2e.item_id_of(first), e2e.item_id_of(second)

        code, out = await gatehouse(tmp_path, "reject", str(item_a), "--reason", "stale news")
        assert code == 0, out
        assert f"item {item_a}: ❌ rejected (now rejected, version 1 of attempt 1)" in out
        last = (await events.for_entity(store, "item", item_a))[-1]
        assert (last.actor, last.reason) == (USER, f"rejected by {USER}: stale news")
        await api.await_for(lambda: edited(api, first, f"rejected by {USER}"), timeout=10)

        # A version the item is not at: refused, nothing changes.
        before = await events.for_entity(store, "item", item_b)
        code, out = await gatehouse(tmp_path, "approve", str(item_b), "--version", "9")
        assert code == 2 and "this card shows version 9 of attempt 1" in out, out
        assert await events.for_entity(store, "item", item_b) == before

        code, out = await gatehouse(tmp_path, "edit", str(item_b), "--text", "-", stdin=b"Mine")
        assert code == 0 and f"item {item_b}: edited: version 2 (now waiting for approval" in out
        await api.await_for(
            lambda: [m for m in live.card_texts(api, e2e.OPERATOR) if "Mine" in m.text], 10
        )
        code, out = await gatehouse(tmp_path, "approve", str(item_b), "--json")
        assert code == 0, out
        approved = [
            e
            for e in await events.for_entity(store, "item", item_b)
            if e.to_state == State.APPROVED
        ]
        assert [e.actor for e in approved] == [USER]
        assert approved[0].reason == f"approved by {USER}"

        code, out = await gatehouse(tmp_path, "redraft", str(item_a), "--note", "shorter")
        assert code == 2 and "drafts from a template" in out


def edited(api: Any, message: Any, words: str) -> bool:
    return words in api.history(e2e.OPERATOR, message.message_id)[-1].text
