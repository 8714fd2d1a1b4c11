"""End to end, the real bot process against the local Bot API server: reject with a
preset and a typed reason, Undo inside and after the grace period, "Approve all" on a
listed set while one item changes version underneath, and four eyes under quorum 2."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.botapi import localapi
from store import items
from store.audit import events
from store.items.machine import State
from tests import snapshot
from tests.e2e import test_bot_e2e as e2e
from tests.fakes.feed_server import FeedServer

OPERATOR, SECOND = e2e.OPERATOR, 1002

PIPELINE = """\
name: news
schedule: 1h
sources:
  - type: rss
    url: {url}
    scope: e2e-news
approval:
{approval}
dispatch:
  type: file
  path: {out}
"""

StartBot = Callable[..., e2e.BotProcess]


@pytest.fixture
def start_bot(tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer) -> Iterator[StartBot]:
    """Start `python -m bot` with the given `approval:` lines and operators."""
    started: list[e2e.BotProcess] = []

    def start(approval: str, operators: str = str(OPERATOR)) -> e2e.BotProcess:
        (tmp_path / "pipelines").mkdir()
        text = PIPELINE.format(url=feed.url("/feed.xml"), out=tmp_path / "out", approval=approval)
        (tmp_path / "pipelines" / "news.yaml").write_text(text)
        process = e2e.BotProcess(tmp_path, api)
        process.env["GATEHOUSE_TELEGRAM__OPERATORS"] = operators
        started.append(process.start())
        return process

    yield start
    for process in started:
        process.stop()
        assert e2e.TOKEN not in process.log.read_text(), "the token reached a log line"


async def trail(tmp_path: Path, item_id: int) -> list[events.Event]:
    found: list[events.Event] = await e2e.read(
        tmp_path / "data", lambda s: events.for_entity(s, "item", item_id)
    )
    return found


def latest(api: localapi.LocalBotApi, message: Any, words: str, chat: int = OPERATOR) -> Any:
    """The message as it looks once an edit shows `words`."""

    def edited() -> Any:
        now = api.history(chat, message.message_id)[-1]
        return now if words in now.text else None

    return api.wait_for(edited, timeout=15)


def with_button(api: localapi.LocalBotApi, message: Any, label: str) -> Any:
    """The message as it looks once it shows a button labelled `label`."""

    def shown() -> Any:
        now = api.history(OPERATOR, message.message_id)[-1]
        return now if label in str(now.reply_markup) else None

    return api.wait_for(shown, timeout=15)


def latest_with(api: localapi.LocalBotApi, chat: int, message_id: int, label: str) -> Any:
    """The message in `chat` as it looks once one of its buttons' labels holds `label`."""

    def shown() -> Any:
        now = api.history(chat, message_id)[-1]
        rows = (now.reply_markup or {}).get("inline_keyboard", [])
        return now if any(label in key["text"] for row in rows for key in row) else None

    return api.wait_for(shown, timeout=15)


def prompt(api: localapi.LocalBotApi, words: str, chat: int = OPERATOR) -> Any:
    return api.wait_for(lambda: [m for m in api.sent(chat) if words in m.text], timeout=10)[-1]


async def test_reject_with_a_preset_and_a_typed_reason(
    start_bot: StartBot, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    start_bot("  reject_reasons: [off-topic, too long]\n  undo_window: 0s")
    first, second = e2e.two_cards(api)

    # Reject shows the pipeline's reasons in place of the card's buttons.
    e2e.tap(api, OPERATOR, first, "Reject")
    reasons = e2e.version_of(api, first.message_id, 2)
    labels = [b["text"] for row in reasons.reply_markup["inline_keyboard"] for b in row]
    assert labels == ["❌ off-topic", "❌ too long", "✍️ other…", "← back"]
    # A double tap on Reject shows the same reasons again: no error reaches the chat.
    e2e.tap(api, OPERATOR, first, "Reject")
    assert e2e.tap(api, OPERATOR, reasons, "too long")["text"] == "❌ rejected"
    decided = latest(api, first, "rejected by")
    assert decided.text.endswith(": too long") and decided.reply_markup is None
    item_a = e2e.item_id_of(first)
    moved = (await trail(tmp_path, item_a))[-1]
    assert (moved.to_state, moved.actor) == (State.REJECTED, events.operator(OPERATOR))
    assert moved.reason == f"rejected by operator:{OPERATOR}: too long"

    # "other…" asks for a reply; the typed reason goes into the event, card and /replay.
    e2e.tap(api, OPERATOR, second, "Reject")
    e2e.tap(api, OPERATOR, e2e.version_of(api, second.message_id, 2), "other")
    asked = prompt(api, "Why reject item")
    assert asked.reply_markup.get("force_reply")
    api.inject_message(OPERATOR, OPERATOR, "Wrong <b>date</b>", asked.message_id)
    assert "rejected: Wrong <b>date</b>" in prompt(api, "rejected: ").text
    assert latest(api, second, "Wrong").text.endswith(": Wrong <b>date</b>")  # as typed
    item_b = e2e.item_id_of(second)
    assert (await trail(tmp_path, item_b))[-1].reason == (
        f"rejected by operator:{OPERATOR}: Wrong <b>date</b>"
    )
    assert "Wrong &lt;b&gt;date&lt;/b&gt;" in e2e.command(api, f"/replay {item_b}") or (
        "Wrong <b>date</b>" in e2e.command(api, f"/replay {item_b}")
    )
    assert not [m for m in api.sent(OPERATOR) if "Something went wrong" in m.text]
    # A second reply to the same prompt changes nothing.
    before = await e2e.read(tmp_path / "data", snapshot.tables)
    api.inject_message(OPERATOR, OPERATOR, "again", asked.message_id)
    assert "no longer open" in prompt(api, "no longer open").text
    after = await e2e.read(tmp_path / "data", snapshot.tables)
    assert e2e.settled(after) == e2e.settled(before)


async def test_undo_inside_and_after_the_grace_period(
    start_bot: StartBot, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    start_bot("  undo_window: 3s")
    first, second = e2e.two_cards(api)
    item_a, out = e2e.item_id_of(first), tmp_path / "out"

    # Approve, then Undo within the window: back to awaiting, nothing sent.
    assert e2e.tap(api, OPERATOR, first, "Approve")["text"] == "✅ approved"
    approved = latest(api, first, "Undo until")
    assert "(sends then)" in approved.text
    assert e2e.tap(api, OPERATOR, approved, "Undo")["text"].startswith("↩️ undone")
    reopened = latest(api, first, "undone by")
    assert reopened.reply_markup["inline_keyboard"][0][0]["text"] == "✅ Approve"
    moves = [(e.from_state, e.to_state) for e in await trail(tmp_path, item_a)]
    assert moves[-2:] == [
        (State.AWAITING_APPROVAL, State.APPROVED),
        (State.APPROVED, State.AWAITING_APPROVAL),
    ]
    # Approved again (the same version): sent once the new window has passed.
    assert e2e.tap(api, OPERATOR, reopened, "Approve")["text"] == "✅ approved"
    again = latest(api, first, "Undo until")
    api.wait_for(lambda: list(out.glob(f"news-{item_a}-v1.md")), timeout=20)
    await e2e.until_state(tmp_path / "data", item_a, State.DISPATCHED)
    # Undo after the window: refused, and nothing changes.
    # Compared as moves: the sealer may seal the trail's last events between the reads.
    settled = [(e.id, e.to_state, e.actor) for e in await trail(tmp_path, item_a)]
    late = e2e.tap(api, OPERATOR, again, "Undo")["text"]
    assert "too late" in late or "only an approval not yet sent" in late
    assert [(e.id, e.to_state, e.actor) for e in await trail(tmp_path, item_a)] == settled
    assert len(list(out.glob(f"news-{item_a}-*.md"))) == 1

    # A reject can be undone too; its Undo after the window is refused.
    e2e.tap(api, OPERATOR, second, "Reject")
    e2e.tap(api, OPERATOR, e2e.version_of(api, second.message_id, 2), "off-topic")
    rejected = latest(api, second, "rejected by")
    assert "(final then)" in rejected.text
    assert e2e.tap(api, OPERATOR, rejected, "Undo")["text"].startswith("↩️ undone")
    item_b = e2e.item_id_of(second)
    assert (await items_get(tmp_path, item_b)).state == State.AWAITING_APPROVAL
    e2e.tap(api, OPERATOR, latest(api, second, "undone by"), "Reject")
    e2e.tap(api, OPERATOR, with_button(api, second, "tone"), "tone")
    final = latest(api, second, ": tone")
    await asyncio.sleep(3.2)  # the window is 3 s
    assert "too late" in e2e.tap(api, OPERATOR, final, "Undo")["text"]
    assert (await items_get(tmp_path, item_b)).state == State.REJECTED


async def items_get(tmp_path: Path, item_id: int) -> items.Item:
    found: items.Item = await e2e.read(tmp_path / "data", lambda s: items.get(s, item_id))
    return found


async def test_approve_all_while_one_item_changes_version_underneath(
    start_bot: StartBot, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    start_bot("  undo_window: 0s")
    first, second = e2e.two_cards(api)
    item_a, item_b = e2e.item_id_of(first), e2e.item_id_of(second)
    listing = e2e.command(api, "/pending news")
    assert f"• {item_a} news v1" in listing and f"• {item_b} news v1" in listing
    listed = api.sent(OPERATOR)[-1]
    e2e.tap(api, OPERATOR, listed, "Approve all 2")
    confirm = e2e.version_of(api, listed.message_id, 2)  # behind a confirmation
    assert "Yes, approve 2" in str(confirm.reply_markup)

    # Item A gets a new version after it was listed.
    e2e.tap(api, OPERATOR, first, "Edit")
    edit = prompt(api, "tap the draft to copy it")
    api.inject_message(OPERATOR, OPERATOR, "A better draft", reply_to_message_id=edit.message_id)
    prompt(api, "Saved as version 2")

    answer = e2e.tap(api, OPERATOR, confirm, "Yes, approve 2")
    assert answer["text"] == "1 of 2 approved"
    summary = prompt(api, "approved 1 of 2")
    # The list itself no longer says two wait, and offers nothing more to decide.
    relisted = api.history(OPERATOR, listed.message_id)[-1]
    assert "1 item waiting for approval" in relisted.text and "2 items" not in relisted.text
    assert f"• {item_a} news v2" in relisted.text and relisted.reply_markup is None
    assert f"item {item_a} not approved: this card shows version 1 of attempt 1" in summary.text
    assert (await items_get(tmp_path, item_a)).state == State.AWAITING_APPROVAL
    b_moves = [e for e in await trail(tmp_path, item_b) if e.to_state == State.APPROVED]
    assert len(b_moves) == 1 and b_moves[0].actor == events.operator(OPERATOR)
    assert not [e for e in await trail(tmp_path, item_a) if e.to_state == State.APPROVED]
    # The list is spent: a second confirmation decides nothing.
    again = e2e.tap(api, OPERATOR, confirm, "Yes, approve 2")
    assert "decided already" in again["text"]


async def test_separate_editor_refused_under_quorum_two(
    start_bot: StartBot, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    start_bot("  quorum: 2\n  undo_window: 0s", operators=f"{OPERATOR},{SECOND}")
    first, _ = e2e.two_cards(api)
    item_a = e2e.item_id_of(first)
    e2e.tap(api, OPERATOR, first, "Edit")
    edit = prompt(api, "tap the draft to copy it")
    api.inject_message(OPERATOR, OPERATOR, "My own words", reply_to_message_id=edit.message_id)
    mine = api.wait_for(lambda: [m for m in e2e.cards(api) if "My own words" in m.text])[0]

    before = await e2e.read(tmp_path / "data", snapshot.tables)
    refused = e2e.tap(api, OPERATOR, mine, "Approve")
    assert refused["text"].startswith("you wrote version 2 of item")
    assert refused["show_alert"] is True
    assert e2e.settled(await e2e.read(tmp_path / "data", snapshot.tables)) == e2e.settled(before)

    # The other approver's vote counts; the editor's never can, and the card says so
    # plainly instead of waiting for the editor.
    theirs = api.wait_for(
        lambda: [m for m in api.sent(SECOND) if "My own words" in m.text and m.reply_markup]
    )[0]
    stuck = re.compile(
        r"needs 2 approvals from people other than (.+), but only (.+) may approve it: reject it"
    )
    shown = stuck.search(theirs.text)
    assert shown is not None and shown[1] != shown[2], theirs.text
    # (Names as the bot knows them: the second operator's from their first tap on.)
    query = api.inject_callback(SECOND, SECOND, theirs.message_id, e2e.button(theirs, "Approve"))
    said = e2e.answer_to(api, query)["text"]
    assert said.startswith("your vote is in: 1 of 2 (needs 2") and stuck.search(said), said
    again = api.inject_callback(SECOND, SECOND, theirs.message_id, e2e.button(theirs, "Approve"))
    said = e2e.answer_to(api, again)["text"]
    assert said.startswith("you already approved this version: 1 of 2 (needs 2"), said
    voted = latest(api, mine, " · needs 2 approvals from people other than")
    assert "waiting for" not in voted.text, voted.text
    assert "Approve" in str(voted.reply_markup) and "Escalate" not in str(voted.reply_markup)
    assert (await items_get(tmp_path, item_a)).state == State.AWAITING_APPROVAL


async def test_a_card_too_few_may_approve_offers_escalate_which_brings_in_escalate_to(
    start_bot: StartBot, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    third = 1003
    start_bot(
        f"  operators: [{OPERATOR}, {SECOND}]\n  quorum: 2\n  undo_window: 0s\n"
        f"  escalate_after: 24h\n  escalate_to: [{third}]",
        operators=f"{OPERATOR},{SECOND},{third}",
    )
    first, _ = e2e.two_cards(api)
    item_a = e2e.item_id_of(first)
    e2e.tap(api, OPERATOR, first, "Edit")
    edit = prompt(api, "tap the draft to copy it")
    api.inject_message(OPERATOR, OPERATOR, "Edited words", reply_to_message_id=edit.message_id)
    theirs = api.wait_for(
        lambda: [m for m in api.sent(SECOND) if "Edited words" in m.text and m.reply_markup]
    )[0]
    assert (
        "escalate it to bring in more approvers, or reject it" in theirs.text
        and "Escalate" in str(theirs.reply_markup)
    )
    # Reject's reasons and back again: the card keeps its Escalate.
    card_id = theirs.message_id
    for label, then in (("Reject", "back"), ("back", "Escalate")):
        query = api.inject_callback(SECOND, SECOND, card_id, e2e.button(theirs, label))
        e2e.answer_to(api, query)
        theirs = latest_with(api, SECOND, card_id, then)

    query = api.inject_callback(SECOND, SECOND, theirs.message_id, e2e.button(theirs, "Escalate"))
    assert e2e.answer_to(api, query)["text"].startswith("🔺 escalated to ")
    brought = api.wait_for(
        lambda: [m for m in api.sent(third) if "Edited words" in m.text and m.reply_markup]
    )[0]
    assert "needs 2 approvals" not in brought.text and "escalated to you" in brought.text
    again = api.inject_callback(SECOND, SECOND, theirs.message_id, e2e.button(theirs, "Escalate"))
    assert e2e.answer_to(api, again)["text"] == "already escalated, or no longer waiting"

    vote = api.inject_callback(SECOND, SECOND, theirs.message_id, e2e.button(theirs, "Approve"))
    assert e2e.answer_to(api, vote)["text"].startswith("your vote is in: 1 of 2 (waiting for ")
    last = api.inject_callback(third, third, brought.message_id, e2e.button(brought, "Approve"))
    assert e2e.answer_to(api, last)["text"] == "✅ approved"
    await e2e.until_state(tmp_path / "data", item_a, State.DISPATCHED)
