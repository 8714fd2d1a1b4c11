"""End to end: the real bot process (`python -m bot`) against the local Bot API server
and a local feed, with the store read from the test through a read-only connection."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.botapi import localapi
from bot.demo.botapi import state as localapi_state
from store import db, items
from store.audit import events
from store.items.machine import State
from tests import snapshot
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer

TOKEN = "987654:e2e-secret-token-value_ABCDEFGHIJKLMNOP"
OPERATOR = 1001
STRANGER = 666
ROOT = Path(__file__).resolve().parents[2]

PIPELINE = """\
name: news
schedule: 1h
sources:
  - type: rss
    url: {url}
    scope: e2e-news
approval:
  quorum: 1
  undo_window: 0s
dispatch:
  type: file
  path: {out}
"""


class BotProcess:
    """`python -m bot` in a subprocess, its stderr in a log file."""

    def __init__(self, tmp: Path, api: localapi.LocalBotApi) -> None:
        self.log = tmp / "bot.log"
        self.env = {
            **os.environ,
            "PTB_TIMEDELTA": "1",
            "GATEHOUSE_TELEGRAM__TOKEN": TOKEN,
            "GATEHOUSE_TELEGRAM__BASE_URL": api.base_url,
            "GATEHOUSE_TELEGRAM__OPERATORS": str(OPERATOR),
            "GATEHOUSE_DATA_DIR": str(tmp / "data"),
            "GATEHOUSE_PIPELINES_DIR": str(tmp / "pipelines"),
            "GATEHOUSE_LOG_LEVEL": "DEBUG",
        }
        self.cwd = tmp
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> BotProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bot"], cwd=self.cwd, env=self.env, stdout=out, stderr=out
            )
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


@pytest.fixture
def feed() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set(
            "/feed.xml",
            feeds.rss(
                [
                    ("g1", "Tom & Jerry", "Body one & more"),
                    ("g2", "Second story", "Body two"),
                ]
            ),
            "application/rss+xml",
        )
        yield server


@pytest.fixture
def bot(tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer) -> Iterator[BotProcess]:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "news.yaml").write_text(
        PIPELINE.format(url=feed.url("/feed.xml"), out=tmp_path / "out")
    )
    process = BotProcess(tmp_path, api).start()
    try:
        yield process
    finally:
        process.stop()
        assert TOKEN not in process.log.read_text(), "the token reached a log line"


def cards(api: localapi.LocalBotApi) -> list[localapi_state.ChatMessage]:
    return [m for m in api.sent(OPERATOR) if m.reply_markup and "item" in m.text]


def button(message: Any, label: str) -> str:
    for row in message.reply_markup["inline_keyboard"]:
        for key in row:
            if label in key["text"]:
                return str(key["callback_data"])
    raise AssertionError(f"no {label} button on {message.text!r}")


def item_id_of(message: Any) -> int:
    return int(message.text.split("item ", 1)[1].split()[0])


def tap(api: localapi.LocalBotApi, user: int, message: Any, label: str) -> dict[str, Any]:
    """Tap a button under `message` as `user`; returns the bot's answer to the tap."""
    return answer_to(
        api, api.inject_callback(OPERATOR, user, message.message_id, button(message, label))
    )


def version_of(api: localapi.LocalBotApi, message_id: int, version: int) -> Any:
    def edited() -> Any:
        found = [m for m in api.history(OPERATOR, message_id) if m.version == version]
        return found[0] if found else None

    return api.wait_for(edited, timeout=10)


def two_cards(api: localapi.LocalBotApi) -> list[Any]:
    def both() -> list[Any]:
        found = cards(api)
        return found if len(found) == 2 else []

    return api.wait_for(both, timeout=60)  # a bound, not a speed: a loaded machine is slow


def answer_to(api: localapi.LocalBotApi, query_id: str) -> dict[str, Any]:
    found = api.wait_for(
        lambda: [a for a in api.callback_answers() if a["callback_query_id"] == query_id],
        timeout=10,
    )
    return found[0]


async def read(data_dir: Path, fn: Any) -> Any:
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    try:
        return await fn(store)
    finally:
        await store.close()


async def until_state(data_dir: Path, item_id: int, state: State) -> None:
    """Wait for the item's state: a dispatched file is written just before its commit."""
    for _ in range(200):  # a bound, not a speed: a loaded machine is slow
        if (await read(data_dir, lambda s: items.get(s, item_id))).state == state:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"item {item_id} never reached {state}")


def settled(tables: snapshot.Tables) -> snapshot.Tables:
    """Every table, with outbox rows reduced to their ids: the running sender updates the rest."""
    return {**tables, "outbox": [row[:1] for row in tables["outbox"]]}


def command(api: localapi.LocalBotApi, text: str, user: int = OPERATOR) -> str:
    before = len(api.sent(OPERATOR))
    api.inject_command(OPERATOR, user, text)
    replies = api.wait_for(lambda: api.sent(OPERATOR)[before:], timeout=10)
    return replies[-1].text


async def test_cards_taps_and_commands(
    bot: BotProcess, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first, second = two_cards(api)
    assert "Tom & Jerry" in first.text and "Body one & more" in first.text  # escaped, shown
    approve = button(first, "Approve")
    item_a = item_id_of(first)
    assert len(approve.encode()) <= 64

    answer = answer_to(api, api.inject_callback(OPERATOR, OPERATOR, first.message_id, approve))
    assert answer["text"] == "✅ approved"
    edited = version_of(api, first.message_id, 2)
    assert f"approved by User {OPERATOR}" in edited.text and edited.reply_markup is None
    trail = await read(data, lambda s: events.for_entity(s, "item", item_a))
    approvals = [e for e in trail if e.to_state == State.APPROVED]
    assert len(approvals) == 1 and approvals[0].actor == events.operator(OPERATOR)

    # The dispatcher carries the approved draft out: a file in the pipeline's folder.
    out = tmp_path / "out"
    api.wait_for(lambda: list(out.glob(f"news-{item_a}-v1.md")), timeout=15)
    assert "Body one & more" in (out / f"news-{item_a}-v1.md").read_text()
    await until_state(data, item_a, State.DISPATCHED)
    dispatched = await read(data, lambda s: events.for_entity(s, "item", item_a))
    # The dispatcher wakes on the approval's commit, so it may have begun before `trail`.
    after = [e.to_state for e in dispatched][-3:]
    assert after == [State.APPROVED, State.DISPATCHING, State.DISPATCHED]

    # The same tap again: answered, and nothing changes.
    again = answer_to(api, api.inject_callback(OPERATOR, OPERATOR, first.message_id, approve))
    assert again["text"] == "nothing changed: the item is dispatched"
    # The sealer may seal the trail meanwhile; what must not change is which events it holds.
    unchanged = await read(data, lambda s: events.for_entity(s, "item", item_a))
    assert [(e.id, e.to_state) for e in unchanged] == [(e.id, e.to_state) for e in dispatched]
    assert len(api.history(OPERATOR, first.message_id)) == 3  # the card, approved, sent

    # A stranger's tap on the other card: refused, the item still waits.
    item_b = item_id_of(second)
    stranger = api.inject_callback(OPERATOR, STRANGER, second.message_id, button(second, "Reject"))
    assert "not an operator" in answer_to(api, stranger)["text"]
    trail_b = await read(data, lambda s: events.for_entity(s, "item", item_b))
    assert trail_b[-1].to_state == State.AWAITING_APPROVAL
    # A forged tag: refused the same way.
    forged = button(second, "Reject")[:-4] + "AAAA"
    assert (
        "not made by this bot"
        in answer_to(api, api.inject_callback(OPERATOR, OPERATOR, second.message_id, forged))[
            "text"
        ]
    )
    assert await read(data, lambda s: events.for_entity(s, "item", item_b)) == trail_b

    status = command(api, "/status")
    assert "news" in status and "1 item waiting" in status and "WAL" not in status
    assert "2 new of 2" in status
    # One process on SQLite: no cluster, leader or lease lines (they are for several workers).
    assert "cluster:" not in status and "leader:" not in status and "lease" not in status
    pending = command(api, "/pending")
    listing = api.sent(OPERATOR)[-1]
    assert f"• {item_b} news" in pending
    assert button(listing, f"item {item_b}") and f"• {item_a} " not in pending
    assert "No budgets configured" in command(api, "/budget")
    assert "Did you mean news" in command(api, "/status nwes")
    assert "Did you mean /stats, /status?" in command(api, "/stauts")
    assert "usage: /replay <item id>" in command(api, "/replay twelve")
    # A stranger's command is ignored. Updates are handled in order, so the answer to the
    # operator's /help sent after it is a barrier: by then the stranger's /status has been
    # handled, and no other reply may follow within a bound.
    before = len(api.sent(OPERATOR))
    api.inject_command(OPERATOR, STRANGER, "/status")
    api.inject_command(OPERATOR, OPERATOR, "/help")
    first_reply = api.wait_for(lambda: api.sent(OPERATOR)[before:], timeout=10)[0]
    assert first_reply.text.startswith("gatehouse\n/status")
    await asyncio.sleep(1.0)
    assert [m.text for m in api.sent(OPERATOR)[before:]] == [first_reply.text]
    assert f"ignored an update from non-operator {STRANGER}" in bot.log.read_text()

    # Reject B with a reason, then /replay shows why it dropped and its button replays it.
    tap(api, OPERATOR, second, "Reject")
    reasons = version_of(api, second.message_id, 2)  # the card's buttons became reasons
    assert tap(api, OPERATOR, reasons, "off-topic")["text"] == "❌ rejected"
    offer_text = command(api, f"/replay {item_b}")
    assert f"rejected by User {OPERATOR}: off-topic" in offer_text
    offer = api.sent(OPERATOR)[-1]
    confirm = tap(api, OPERATOR, offer, "Replay")
    assert confirm["text"] == "replayed: attempt 2"
    replayed = await read(data, lambda s: items.get(s, item_b))
    assert replayed.attempt == 2


async def test_a_card_pending_at_sigkill_works_after_restart(
    bot: BotProcess, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    first, _ = two_cards(api)
    bot.kill()
    bot.start()
    # The new process polls again; the old card's button still verifies and decides.
    answer = tap(api, OPERATOR, first, "Approve")
    assert answer["text"] == "✅ approved"
    edited = version_of(api, first.message_id, 2)
    assert f"approved by User {OPERATOR}" in edited.text
    item_id = item_id_of(first)
    api.wait_for(lambda: list((tmp_path / "out").glob(f"news-{item_id}-v1.md")), timeout=15)
    await until_state(tmp_path / "data", item_id, State.DISPATCHED)
    trail = await read(tmp_path / "data", lambda s: events.for_entity(s, "item", item_id))
    assert [(e.to_state, e.actor) for e in trail[-3:]] == [
        (State.APPROVED, events.operator(OPERATOR)),
        (State.DISPATCHING, "system"),
        (State.DISPATCHED, "system"),
    ]
    assert [e.to_state for e in trail].count(State.APPROVED) == 1


async def test_debug_logging_never_shows_the_token(
    bot: BotProcess, api: localapi.LocalBotApi
) -> None:
    first, _ = two_cards(api)
    tap(api, OPERATOR, first, "Approve")
    command(api, "/status")
    assert bot.stop() == 0
    log = bot.log.read_text()
    assert " DEBUG " in log and "getUpdates" in log  # the bot really logged at DEBUG
    secret = TOKEN.split(":", 1)[1]
    assert TOKEN not in log and secret not in log


async def test_edit_posts_a_new_card_and_the_old_one_goes_stale(
    bot: BotProcess, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    first, _ = two_cards(api)
    item_id = item_id_of(first)
    tap(api, OPERATOR, first, "Edit")
    prompt = api.wait_for(lambda: [m for m in api.sent(OPERATOR) if "tap the draft" in m.text])[0]
    assert prompt.reply_markup and prompt.reply_markup.get("force_reply")
    api.inject_message(OPERATOR, OPERATOR, "Better <words>", reply_to_message_id=prompt.message_id)
    new_card = api.wait_for(lambda: [m for m in cards(api) if "Better <words>" in m.text])[0]
    assert "version 2" in new_card.text
    old = version_of(api, first.message_id, 2)
    assert "edited by" in old.text and old.reply_markup is None
    # A tap on the old card's button is refused; the new card's works.
    before_stale = settled(await read(tmp_path / "data", snapshot.tables))
    stale = tap(api, OPERATOR, first, "Approve")
    assert stale["text"] == (
        f"this card shows version 1 of attempt 1; item {item_id} is now at version 2 of attempt 1"
    )
    assert settled(await read(tmp_path / "data", snapshot.tables)) == before_stale
    assert tap(api, OPERATOR, new_card, "Approve")["text"] == "✅ approved"
    history = command(api, f"/history {item_id}")
    assert "edited: version 1 -&gt; 2" in history or "edited: version 1 -> 2" in history
    assert f"approved by User {OPERATOR}" in history
    runs = command(api, "/status news")
    assert "last green" in runs and "2 new of 2" in runs
