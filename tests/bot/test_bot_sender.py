"""The outbox sender against a real store and the local Bot API server over HTTP."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.ext import AIORateLimiter, ExtBot

from bot import app
from bot.chat import sender, sent_messages
from bot.demo.botapi import localapi
from bot.demo.botapi import state as localapi_state
from pipelines.ground import retry
from pipelines.service import workers
from store import db, items, outbox

TOKEN = "555111:sender-test-token_abcdefghijklmnopqrstu"
CHATS = [11, 12]
SOURCE_IDS = itertools.count(1)
KEYBOARD = InlineKeyboardMarkup([[InlineKeyboardButton("ok", callback_data="x")]])


def card_keyboard(row: outbox.Row) -> InlineKeyboardMarkup | None:
    """Buttons under cards only, as the bot's own keyboard gives an undecided card."""
    return KEYBOARD if row.kind == "card" else None


@pytest.fixture(autouse=True)
def _timedelta(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "1")  # else PTB warns on every RetryAfter


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


def make_sender(store: db.Store, bot: Bot, now: datetime) -> sender.Sender:
    return sender.Sender(store, bot, lambda row: CHATS, card_keyboard, clock=lambda: now)


async def card_row(store: db.Store, now: datetime, text: str = "the draft <b>") -> int:
    item = await store.write(
        items.create_sync, "news", "s", f"g{next(SOURCE_IDS)}", {"title": "T"}, now
    )
    assert item is not None
    payload = {"pipeline": "news", "title": "T", "link": None, "text": text}
    row_id = await outbox.enqueue(
        store, "card", outbox.OPERATORS, {**payload, "attempt": 1, "version": 1}, now,
        item_id=item.id,
    )  # fmt: skip
    assert row_id is not None
    return row_id


async def test_a_card_reaches_every_chat_and_records_its_messages(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    row_id = await card_row(store, now, text="line\n" * 1000)  # two messages per chat
    assert await make_sender(store, bot, now).send_due(now) == 1
    row = await store.read(outbox.get_sync, row_id)
    ids = json.loads(row.external_id or "")
    assert row.state == "sent" and sorted(ids) == ["11", "12"]
    for chat in CHATS:
        parts = api.sent(chat)
        assert [m.message_id for m in parts] == ids[str(chat)] and len(parts) == 2
        assert parts[0].reply_markup is None and parts[1].reply_markup == KEYBOARD.to_dict()
    assert "the draft" not in api.sent(11)[0].text


@pytest.mark.parametrize("status", [429, 502])
async def test_flood_control_and_server_errors_retry_later(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime, status: int
) -> None:
    row_id = await card_row(store, now)
    api.fail_next("sendMessage", status, retry_after=7)
    the_sender = make_sender(store, bot, now)
    assert await the_sender.send_due(now) == 0
    row = await store.read(outbox.get_sync, row_id)
    wait = timedelta(seconds=7) if status == 429 else timedelta(seconds=2)
    assert row.state == "pending" and row.next_attempt_at == now + wait
    assert row.last_error == (
        "flood control: retry after 7 s" if status == 429 else "NetworkError: Bad Gateway"
    )
    assert await the_sender.send_due(now + wait - timedelta(seconds=1)) == 0  # not yet due
    assert await the_sender.send_due(now + wait) == 1
    # Chat 11 had its message before the error: it is not sent a second copy.
    assert [len(api.sent(chat)) for chat in CHATS] == [1, 1]


def test_retry_after_accepts_int_and_timedelta() -> None:
    from telegram import error

    assert retry.seconds(error.RetryAfter(5).retry_after) == 5.0
    assert retry.seconds(error.RetryAfter(timedelta(seconds=2.5)).retry_after) == 2.5


async def test_a_card_edit_counts_not_modified_as_success(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    row_id = await card_row(store, now)
    the_sender = make_sender(store, bot, now)
    await the_sender.send_due(now)
    card = await store.read(outbox.get_sync, row_id)
    assert card.item_id is not None
    edit = {"attempt": 1, "version": 1, "state": "approved", "status": "✅ approved by 11"}
    edit_id = await outbox.enqueue(
        store, "card_edit", outbox.OPERATORS, edit, now, item_id=card.item_id
    )
    assert edit_id is not None
    api.fail_next("editMessageText", 400, description="Bad Request: message is not modified")
    assert await the_sender.flush_item(card.item_id, now) == 1
    assert (await store.read(outbox.get_sync, edit_id)).state == "sent"
    # One chat answered "not modified"; the other shows the decision, without buttons.
    unchanged, edited = (api.sent(chat)[0] for chat in CHATS)
    assert "✅ approved by 11" not in unchanged.text and unchanged.reply_markup is not None
    assert "✅ approved by 11" in edited.text and edited.reply_markup is None


async def test_rows_pending_at_a_crash_are_sent_by_the_next_process(
    data_dir: Path, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    config = db.StoreConfig(data_dir=data_dir)
    first = await db.open(config)
    row_id = await card_row(first, now)
    await first.close()  # the process ended before the sender ran
    second = await db.open(config)
    try:
        assert await make_sender(second, bot, now).send_due(now) == 1
        assert (await second.read(outbox.get_sync, row_id)).state == "sent"
    finally:
        await second.close()
    assert [len(api.sent(chat)) for chat in CHATS] == [1, 1]


async def test_an_alert_goes_once_with_its_message_id(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    payload = {"text": "budget <80%> used", "level": "warning"}
    row_id = await outbox.enqueue(store, "alert", outbox.ALERTS, payload, now)
    assert row_id is not None
    the_sender = make_sender(store, bot, now)
    assert await the_sender.send_due(now) == 1
    assert await the_sender.send_due(now) == 0
    [message] = api.sent(11)
    assert message.text == "⚠️ budget <80%> used"
    row = await store.read(outbox.get_sync, row_id)
    assert json.loads(row.external_id or "")["11"] == [message.message_id]


# -- faults: unreadable answers, refusals, giving up, parking ---------------------------------


def draft_of(message: localapi_state.ChatMessage) -> str:
    """A card's draft text: between its header and its footer."""
    return message.text.split("\n\n")[1]


def fault_alerts(rows: list[outbox.Row]) -> list[outbox.Row]:
    return [r for r in rows if (r.dedupe_key or "").startswith("worker-fault:outbox-sender:")]


def reporting_sender(store: db.Store, bot: Bot, now: datetime) -> sender.Sender:
    registry = workers.Registry(store, lambda: now)
    return sender.Sender(
        store, bot, lambda row: CHATS, card_keyboard, clock=lambda: now,
        report=registry.report,
    )  # fmt: skip


def unexpected_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "bot.chat.sender" and r.exc_info]


async def test_a_reply_with_a_date_in_milliseconds_counts_as_sent_and_the_next_card_goes(
    store: db.Store,
    bot: Bot,
    api: localapi.LocalBotApi,
    now: datetime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = await card_row(store, now, text="first")
    second = await card_row(store, now, text="second")
    unreadable = {
        "message_id": 77,
        "date": 1_764_590_000_000,
        "chat": {"id": 11, "type": "private"},
    }
    api.answer_next("sendMessage", unreadable)
    the_sender = reporting_sender(store, bot, now)
    assert await the_sender.send_due(now) == 2
    [logged] = unexpected_errors(caplog)
    assert logged.levelno == logging.ERROR and "unreadable answer for chat 11" in logged.message
    # The first card is not sent to chat 11 again (Telegram may well show it): id unknown.
    row = await store.read(outbox.get_sync, first)
    assert row.state == "sent" and json.loads(row.external_id or "")["11"] == [sent_messages.UNREAD]
    assert draft_of(api.sent(12)[0]) == "first"
    assert draft_of(api.sent(11)[-1]) == "second"
    assert len(api.calls("sendMessage")) == 4
    assert (await store.read(outbox.get_sync, second)).state == "sent"
    [alert] = fault_alerts(await outbox.due(store, now, ["alert"]))
    assert "unexpected ValueError reading Telegram's answer" in alert.payload["text"]


async def sent_card_and_edit(store: db.Store, the_sender: sender.Sender, now: datetime) -> int:
    card_id = await card_row(store, now)
    assert await the_sender.send_due(now) == 1
    card = await store.read(outbox.get_sync, card_id)
    assert card.item_id is not None
    edit = {"attempt": 1, "version": 1, "state": "approved", "status": "✅ approved by 11"}
    edit_id = await outbox.enqueue(
        store, "card_edit", outbox.OPERATORS, edit, now, item_id=card.item_id
    )
    assert edit_id is not None
    return edit_id


async def test_an_edit_answered_null_is_logged_at_once_and_the_next_card_still_goes(
    store: db.Store,
    bot: Bot,
    api: localapi.LocalBotApi,
    now: datetime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    the_sender = reporting_sender(store, bot, now)
    edit_id = await sent_card_and_edit(store, the_sender, now)
    next_card = await card_row(store, now, text="next card")
    api.answer_next("editMessageText", None)
    assert await the_sender.send_due(now) == 1  # the next card; the edit waits
    [logged] = unexpected_errors(caplog)
    assert f"outbox row {edit_id} (card_edit) failed unexpectedly" in logged.message
    assert (await store.read(outbox.get_sync, next_card)).state == "sent"
    assert draft_of(api.sent(11)[-1]) == "next card"
    edit = await store.read(outbox.get_sync, edit_id)
    assert (edit.state, edit.attempts) == ("pending", 1)
    assert edit.next_attempt_at == now + timedelta(seconds=2)
    assert edit.last_error is not None and edit.last_error.startswith("unexpected AttributeError")
    # At its retry the edit goes through, with the operators' alert about the fault.
    [alert] = fault_alerts(await outbox.due(store, now, ["alert"]))
    assert await the_sender.send_due(now + timedelta(seconds=2)) == 2
    assert (await store.read(outbox.get_sync, edit_id)).state == "sent"
    assert (await store.read(outbox.get_sync, alert.id)).state == "sent"
    assert all("✅ approved by 11" in api.sent(chat)[0].text for chat in CHATS)


async def test_a_row_that_keeps_failing_is_parked_with_its_reason_and_the_rest_go_on(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    the_sender = reporting_sender(store, bot, now)
    edit_id = await sent_card_and_edit(store, the_sender, now)
    at = now
    for attempt in range(sender.MAX_ATTEMPTS):
        api.answer_next("editMessageText", None)
        alert = await outbox.enqueue(store, "alert", outbox.ALERTS, {"text": f"n{attempt}"}, at)
        await the_sender.send_due(at)
        assert alert is not None and (await store.read(outbox.get_sync, alert)).state == "sent"
        at = (await store.read(outbox.get_sync, edit_id)).next_attempt_at
    edit = await store.read(outbox.get_sync, edit_id)
    assert (edit.state, edit.attempts) == ("failed", sender.MAX_ATTEMPTS)
    assert edit.last_error is not None
    assert edit.last_error.startswith(f"parked after {sender.MAX_ATTEMPTS} attempts: unexpected")
    assert "AttributeError" in edit.last_error
    assert await the_sender.send_due(at + timedelta(days=1)) == 0  # never tried again
    assert len(api.calls("editMessageText")) == sender.MAX_ATTEMPTS
    # The operators were told once, not ten times.
    told = await store.read(
        lambda conn: conn.execute(
            "SELECT count(*) FROM outbox WHERE dedupe_key LIKE 'worker-fault:outbox-sender:%'"
        ).fetchone()[0]
    )
    assert told == 1


async def test_telegram_refusing_a_card_fails_it_at_once_and_the_next_goes(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    blocked = await card_row(store, now, text="to a blocked chat")
    after = await card_row(store, now, text="after")
    api.fail_next("sendMessage", 403, description="Forbidden: bot was blocked by the user")
    the_sender = make_sender(store, bot, now)
    assert await the_sender.send_due(now) == 1
    row = await store.read(outbox.get_sync, blocked)
    assert (row.state, row.attempts) == ("failed", 1)
    assert row.last_error == "Forbidden: bot was blocked by the user"
    assert (await store.read(outbox.get_sync, after)).state == "sent"
    assert await the_sender.send_due(now + timedelta(days=1)) == 0
    assert [draft_of(m) for m in api.sent(11)] == ["after"]


async def test_transient_errors_give_up_after_max_attempts(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    row_id = await card_row(store, now)
    the_sender = make_sender(store, bot, now)
    at = now
    for _ in range(sender.MAX_ATTEMPTS):
        api.fail_next("sendMessage", 502)
        assert await the_sender.send_due(at) == 0
        at = (await store.read(outbox.get_sync, row_id)).next_attempt_at
    row = await store.read(outbox.get_sync, row_id)
    assert (row.state, row.attempts) == ("failed", sender.MAX_ATTEMPTS)
    assert (
        row.last_error == f"parked after {sender.MAX_ATTEMPTS} attempts: NetworkError: Bad Gateway"
    )
    assert await the_sender.send_due(at + timedelta(days=1)) == 0
    assert len(api.calls("sendMessage")) == sender.MAX_ATTEMPTS
    assert api.sent(11) == [] and api.sent(12) == []


async def test_a_card_cut_short_by_an_error_resumes_at_the_missing_part_after_a_restart(
    data_dir: Path, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    config = db.StoreConfig(data_dir=data_dir)
    first = await db.open(config)
    row_id = await card_row(first, now, text="line\n" * 1000)  # two messages per chat
    # The first part reaches chat 11, its second part meets a server error.
    api.state.add_fault("sendmessage", localapi_state.Fault(None))
    api.fail_next("sendMessage", 502)
    assert await make_sender(first, bot, now).send_due(now) == 0
    pending = await first.read(outbox.get_sync, row_id)
    [part_one] = api.sent(11)
    assert json.loads(pending.external_id or "") == {"11": [part_one.message_id]}
    await first.close()  # the process ends; the next one must not send part one again
    second = await db.open(config)
    try:
        assert await make_sender(second, bot, now).send_due(now + timedelta(seconds=2)) == 1
        row = await second.read(outbox.get_sync, row_id)
    finally:
        await second.close()
    assert [len(api.sent(chat)) for chat in CHATS] == [2, 2]
    assert json.loads(row.external_id or "")["11"] == [m.message_id for m in api.sent(11)]


# -- flood control and wake-ups, through the running loop -------------------------------------


async def test_three_429s_hold_back_every_later_card_until_retry_after_in_order(
    store: db.Store, api: localapi.LocalBotApi
) -> None:
    # The bot as bot.app builds it: PTB's limiter retries a 429 once, then the sender holds.
    limiter = AIORateLimiter(max_retries=app.RATE_LIMIT_RETRIES)
    async with ExtBot(TOKEN, base_url=api.base_url, rate_limiter=limiter) as bot:
        the_sender = sender.Sender(
            store, bot, lambda row: CHATS, card_keyboard, per_chat_per_second=50
        )
        for _ in range(3):
            api.fail_next("sendMessage", 429, retry_after=1)
        stop = asyncio.Event()
        running = asyncio.create_task(the_sender.run(stop))
        now = datetime.now(UTC)
        rows = [await card_row(store, now, text=f"card {n}") for n in range(5)]
        await api.await_for(lambda: len(api.sent(12)) == 5, timeout=20)
        stop.set()
        await running
    for chat in CHATS:
        assert [draft_of(m) for m in api.sent(chat)] == [f"card {n}" for n in range(5)]
    calls = api.calls("sendMessage")
    floods = [c for c in calls if c.status == 429]
    assert len(floods) == 3 and len(calls) == 3 + 10
    for flood in floods:  # nothing went anywhere within retry_after of a 429
        assert not [c for c in calls if c.status == 200 and 0 < c.at - flood.at < 1.0]
    for row_id in rows:
        row = await store.read(outbox.get_sync, row_id)
        assert (row.state, row.attempts) == ("sent", 1)  # a flood wait is not an attempt


async def test_the_sender_sleeps_until_a_row_commits(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi
) -> None:
    the_sender = sender.Sender(store, bot, lambda row: CHATS, card_keyboard)
    stop = asyncio.Event()
    running = asyncio.create_task(the_sender.run(stop))
    await api.await_for(lambda: True)
    await asyncio.sleep(0.2)  # the loop has found nothing and sleeps (up to POLL_EVERY_S)
    assert sender.POLL_EVERY_S >= 60
    await card_row(store, datetime.now(UTC), text="woken")
    await api.await_for(lambda: len(api.sent(12)) == 1, timeout=5)
    stop.set()
    await running
    assert draft_of(api.sent(11)[0]) == "woken"


async def test_a_second_chat_limited_while_one_is_held_holds_every_chat(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    # Each alert goes to the chat named in its text: 11, then 12, then 13.
    def to_chat(row: outbox.Row) -> list[int]:
        return [int(row.payload["text"])]

    the_sender = sender.Sender(store, bot, to_chat, lambda row: None, clock=lambda: now)
    ids = [
        await outbox.enqueue(store, "alert", outbox.ALERTS, {"text": str(chat)}, now)
        for chat in (11, 12, 13)
    ]
    api.fail_next("sendMessage", 429, retry_after=5)
    api.fail_next("sendMessage", 429, retry_after=5)
    assert await the_sender.send_due(now) == 0
    # Chat 13 was never limited, but two chats at once means the bot's own limit.
    assert len(api.calls("sendMessage")) == 2 and api.sent(13) == []
    assert await the_sender.send_due(now + timedelta(seconds=4)) == 0
    assert await the_sender.send_due(now + timedelta(seconds=5)) == 3
    assert [len(api.sent(chat)) for chat in (11, 12, 13)] == [1, 1, 1]
    rows = [await store.read(outbox.get_sync, row_id) for row_id in ids if row_id is not None]
    assert [(r.state, r.attempts) for r in rows] == [("sent", 1)] * 3


async def test_an_edit_waiting_for_its_card_is_not_worn_out_by_the_wait(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    card_id = await card_row(store, now)
    card = await store.read(outbox.get_sync, card_id)
    edit = {"attempt": 1, "version": 1, "state": "approved", "status": "✅ approved by 11"}
    edit_id = await outbox.enqueue(
        store, "card_edit", outbox.OPERATORS, edit, now, item_id=card.item_id
    )
    assert edit_id is not None
    the_sender = make_sender(store, bot, now)
    for _ in range(3):  # the card meets server errors: 2 + 4 + 8 s of backoff
        api.fail_next("sendMessage", 502)
    for second in range(2 * sender.MAX_ATTEMPTS):  # the edit looks every second meanwhile
        await the_sender.send_due(now + timedelta(seconds=second))
    assert (await store.read(outbox.get_sync, card_id)).state == "sent"
    done = await store.read(outbox.get_sync, edit_id)
    assert (done.state, done.attempts) == ("sent", 1)
    assert all("✅ approved by 11" in api.sent(chat)[0].text for chat in CHATS)


async def test_a_flood_wait_still_holds_its_chats_after_a_restart(
    data_dir: Path, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    config = db.StoreConfig(data_dir=data_dir)
    first = await db.open(config)
    held = await card_row(first, now, text="held")
    api.fail_next("sendMessage", 429, retry_after=30)
    assert await make_sender(first, bot, now).send_due(now) == 0
    await first.close()  # the process ends while Telegram's wait runs
    second = await db.open(config)
    try:
        later = await card_row(second, now, text="later")
        the_sender = make_sender(second, bot, now)
        await the_sender.restore_holds(now + timedelta(seconds=10))
        assert await the_sender.send_due(now + timedelta(seconds=10)) == 0  # no overtaking
        assert await the_sender.send_due(now + timedelta(seconds=30)) == 2
        states = [(await second.read(outbox.get_sync, r)).state for r in (held, later)]
    finally:
        await second.close()
    assert states == ["sent", "sent"]
    for chat in CHATS:
        assert [draft_of(m) for m in api.sent(chat)] == ["held", "later"]


async def test_a_row_read_before_it_was_sent_is_not_sent_again(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    the_sender = make_sender(store, bot, now)
    edit_id = await sent_card_and_edit(store, the_sender, now)
    stale_copy = await store.read(
        outbox.get_sync, edit_id
    )  # the loop read it; a tap flushes it first
    assert stale_copy.item_id is not None
    assert await the_sender.flush_item(stale_copy.item_id, now) == 1
    assert await the_sender.send_row(stale_copy, now) is False
    assert len(api.calls("editMessageText")) == len(CHATS)


async def test_a_full_batch_of_held_rows_waits_instead_of_spinning(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sender, "BATCH", 2)
    now = datetime.now(UTC)
    first = await card_row(store, now, text="deferred by an earlier process")
    await outbox.defer(store, first, "flood control: retry after 30 s", now + timedelta(seconds=30))
    for n in range(2):
        await card_row(store, now, text=f"behind it {n}")
    passes = 0
    real_due = outbox.due

    async def counted_due(*args: Any, **kwargs: Any) -> list[outbox.Row]:
        nonlocal passes
        passes += 1
        return await real_due(*args, **kwargs)

    monkeypatch.setattr(outbox, "due", counted_due)
    the_sender = sender.Sender(store, bot, lambda row: CHATS, card_keyboard)
    stop = asyncio.Event()
    running = asyncio.create_task(the_sender.run(stop))
    await asyncio.sleep(0.5)
    stop.set()
    await running
    assert passes == 1 and api.calls("sendMessage") == []
