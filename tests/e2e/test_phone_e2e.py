"""The operator's phone, end to end: the real bot process (`python -m bot`) against the
local Bot API server, a local feed, a webhook receiver and the `gatehouse` CLI.

A dispatched card says where it went; a permanent failure shows the error and a Retry
that sends again with the same idempotency key; Show card quotes the card, or sends a
fresh one after its message was deleted; people are named, also after a restart (and an
Edit prompt still works then); the day's signed head reaches the chat; an audit export
verifies offline and fails once a row is edited, removed or the tail is cut.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.botapi import localapi
from pipelines import dispatch
from store import items, outbox
from store.audit import events
from store.items.machine import State
from tests.e2e import test_bot_e2e as e2e
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer
from tests.fakes.webhook_server import Reply, WebhookServer

OPERATOR = e2e.OPERATOR
OTHER = 1002  # a second operator, who never acted before the restart
PATIENCE = 60  # seconds: a bound for a loaded machine, not a speed

WEBHOOK = """\
name: news
schedule: 1h
sources:
  - type: rss
    url: {url}
    scope: e2e-news
dispatch:
  type: webhook
  url: {hook}
"""


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=e2e.TOKEN) as server:
        yield server


@pytest.fixture
def feed() -> Iterator[FeedServer]:
    with FeedServer() as server:
        entries = [("g1", "Bike lanes", "Council approves bike lanes"), ("g2", "Library", "Open")]
        server.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        yield server


def start(tmp: Path, api: localapi.LocalBotApi, pipeline: str) -> e2e.BotProcess:
    (tmp / "pipelines").mkdir(exist_ok=True)
    (tmp / "pipelines" / "news.yaml").write_text(pipeline)
    process = e2e.BotProcess(tmp, api)
    process.env["GATEHOUSE_TELEGRAM__OPERATORS"] = f"{OPERATOR},{OTHER}"
    return process.start()


@pytest.fixture
def stop_after() -> Iterator[list[e2e.BotProcess]]:
    started: list[e2e.BotProcess] = []
    yield started
    for process in started:
        process.stop()
        assert e2e.TOKEN not in process.log.read_text(), "the token reached a log line"


def latest(api: localapi.LocalBotApi, message_id: int, has: str) -> Any:
    """The message once an edit of it holds `has`."""
    return api.wait_for(
        lambda: [m for m in api.history(OPERATOR, message_id) if has in m.text][-1:],
        timeout=PATIENCE,
    )[0]


def gatehouse(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {
        "GATEHOUSE_DATA_DIR": str(tmp / "data"),
        "GATEHOUSE_PIPELINES_DIR": str(tmp / "pipelines"),
    }
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], cwd=tmp, env=env, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


async def test_a_permanent_failure_shows_the_error_and_retry_sends_with_the_same_key(
    tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer, stop_after: list[Any]
) -> None:
    with WebhookServer() as hook:
        hook.script(Reply(422, b'{"error": "missing field"}'))
        text = WEBHOOK.format(url=feed.url("/feed.xml"), hook=hook.url)
        stop_after.append(start(tmp_path, api, text))
        first, _ = e2e.two_cards(api)
        assert e2e.tap(api, OPERATOR, first, "Approve")["text"] == "✅ approved"
        failed = latest(api, first.message_id, "not sent")
        assert "422" in failed.text and "approved by User 1001" in failed.text
        retry = e2e.button(failed, "Retry")
        item_id = e2e.item_id_of(first)
        assert (await e2e.read(tmp_path / "data", lambda s: items.get(s, item_id))).state == (
            State.FAILED
        )
        # The receiver is fixed; Retry dispatches again under the same key.
        answer = e2e.answer_to(
            api, api.inject_callback(OPERATOR, OPERATOR, first.message_id, retry)
        )
        assert answer["text"] == "🔁 dispatching again"
        sent = latest(api, first.message_id, "📤 sent")
        assert "answered 200" in sent.text and sent.reply_markup is None
        keys = {r.headers["idempotency-key"] for r in hook.requests}
        assert keys == {dispatch.idempotency_key("news", item_id, 1, 1)} and len(hook.requests) == 2
        trail = await e2e.read(tmp_path / "data", lambda s: events.for_entity(s, "item", item_id))
        assert [e.to_state for e in trail[-4:]] == [
            State.FAILED, State.APPROVED, State.DISPATCHING, State.DISPATCHED,
        ]  # fmt: skip
        assert trail[-3].actor == f"operator:{OPERATOR}"
        # The same Retry again: answered, and nothing is sent.
        again = e2e.answer_to(api, api.inject_callback(OPERATOR, OPERATOR, first.message_id, retry))
        assert "not failed at dispatch" in again["text"] and len(hook.requests) == 2


async def cards_delivered(tmp: Path, item_id: int) -> None:
    """Wait until the item's card reached every operator's chat (a bound, not a speed)."""
    for _ in range(PATIENCE * 10):
        rows = await e2e.read(tmp / "data", lambda s: outbox.for_item(s, item_id, "card"))
        if rows and all(row.state == "sent" for row in rows):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"item {item_id}'s card was not delivered")


async def test_show_card_quotes_the_card_or_sends_a_fresh_one_when_it_is_gone(
    tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer, stop_after: list[Any]
) -> None:
    pipeline = e2e.PIPELINE.format(url=feed.url("/feed.xml"), out=tmp_path / "out")
    stop_after.append(start(tmp_path, api, pipeline))
    _, second = e2e.two_cards(api)
    item_id = e2e.item_id_of(second)
    await cards_delivered(tmp_path, item_id)
    e2e.command(api, "/pending")
    listing = api.sent(OPERATOR)[-1]
    shown = e2e.tap(api, OPERATOR, listing, f"item {item_id}")
    assert "quoted below" in shown["text"]
    pointer = api.sent(OPERATOR)[-1]
    assert pointer.reply_to_message_id == second.message_id and f"item {item_id}" in pointer.text
    # /history names the item: its reply quotes the card too.
    e2e.command(api, f"/history {item_id}")
    assert api.sent(OPERATOR)[-1].reply_to_message_id == second.message_id

    api.state.delete(OPERATOR, second.message_id)  # the operator cleared it
    before = len(e2e.cards(api))
    assert "fresh card follows" in e2e.tap(api, OPERATOR, listing, f"item {item_id}")["text"]
    fresh = api.wait_for(lambda: e2e.cards(api)[before:], timeout=PATIENCE)[0]
    assert e2e.item_id_of(fresh) == item_id and fresh.text == second.text
    # Only this chat got the fresh copy; its buttons decide, and the copy is edited.
    assert e2e.tap(api, OPERATOR, fresh, "Approve")["text"] == "✅ approved"
    assert "📤 sent: wrote" in latest(api, fresh.message_id, "📤 sent").text
    assert len([m for m in api.sent(OTHER) if f"item {item_id}" in m.text]) == 1


async def test_names_after_a_restart_the_sent_card_and_a_verifiable_export(
    tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer, stop_after: list[Any]
) -> None:
    out = tmp_path / "out"
    pipeline = e2e.PIPELINE.format(url=feed.url("/feed.xml"), out=out)
    api.name_user(OPERATOR, "Ana", "ana")
    bot = start(tmp_path, api, pipeline)
    stop_after.append(bot)
    first, second = e2e.two_cards(api)
    e2e.tap(api, OPERATOR, first, "Approve")
    sent = latest(api, first.message_id, "📤 sent")
    path = out / f"news-{e2e.item_id_of(first)}-v1.md"
    assert "✅ approved by Ana (@ana)" in sent.text and f"📤 sent: wrote {path}" in sent.text
    # Edit shows the draft to copy; the prompt outlives a restart.
    e2e.tap(api, OPERATOR, second, "Edit")
    prompt = api.wait_for(lambda: [m for m in api.sent(OPERATOR) if "tap the draft" in m.text])[0]
    assert "Open" in prompt.text and any(e["type"] == "pre" for e in prompt.entities)
    assert bot.stop() == 0  # SIGTERM: the chain head is signed on the way out

    bot.start()
    api.inject_message(OPERATOR, OPERATOR, "Open all day", reply_to_message_id=prompt.message_id)
    new_card = api.wait_for(lambda: [m for m in e2e.cards(api) if "Open all day" in m.text],
                            timeout=PATIENCE)[0]  # fmt: skip
    assert "edited by Ana (@ana)" in new_card.text
    # A second operator asks after the restart: Ana's name comes from the store.
    before = len(api.sent(OTHER))
    api.inject_command(OTHER, OTHER, f"/history {e2e.item_id_of(first)}")
    replies = api.wait_for(
        lambda: [m for m in api.sent(OTHER)[before:] if "by system" in m.text], timeout=PATIENCE
    )
    history = replies[0].text
    assert "approved by Ana (@ana)" in history and "operator:" not in history
    head = api.wait_for(lambda: [m for m in api.sent(OPERATOR) if "🔏 audit head" in m.text],
                        timeout=PATIENCE)[0]  # fmt: skip
    assert bot.stop() == 0

    key = gatehouse(tmp_path, "audit", "key")
    assert key.returncode == 0 and key.stdout.strip() not in head.text  # no base64 wall
    export = tmp_path / "audit.jsonl"
    done = gatehouse(tmp_path, "audit", "export", "--out", str(export))
    assert done.returncode == 0, done.stderr
    lines = export.read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["record"] == "checkpoint"
    # One short line naming the event it signed and the key, as a phone shows it whole;
    # the signature itself is in the export.
    shown = int(head.text.split("#", 1)[1].split()[0])
    (signed,) = [c for c in map(json.loads, lines) if c.get("event_id") == shown
                 and c["record"] == "checkpoint"]  # fmt: skip
    assert head.text.startswith(f"🔏 audit head #{shown} signed ")
    assert f"key {signed['key_id'][:8]}…, hash {signed['hash'][:12]}…" in head.text
    assert signed["signature"] not in head.text and "\n" not in head.text
    assert len(head.text) < 160

    def verify(text: str) -> subprocess.CompletedProcess[str]:
        path = tmp_path / "check.jsonl"
        path.write_text(text)
        return gatehouse(tmp_path, "audit", "verify", "--export", str(path),
                         "--public-key", key.stdout.strip())  # fmt: skip

    good = verify("".join(lines))
    assert good.returncode == 0 and "chain intact" in good.stdout, good.stdout + good.stderr
    events = [line for line in lines if '"record":"event"' in line]
    signed = [line for line in lines if '"record":"checkpoint"' in line]
    edited = "".join(lines).replace('"actor":"operator:1001"', '"actor":"operator:1002"', 1)
    assert "(edited)" in verify(edited).stdout
    removed = "".join(events[:3] + events[4:] + signed)
    assert "event 4 is missing" in verify(removed).stdout
    cut = "".join(events[:-2] + signed)
    tail = verify(cut)
    assert tail.returncode == 1 and "the tail is cut" in tail.stdout
