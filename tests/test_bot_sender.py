"""The outbox sender against a real store and the local Bot API server over HTTP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup

from bot import localapi, sender
from store import db, items, outbox

TOKEN = "555111:sender-test-token_abcdefghijklmnopqrstu"
CHATS = [11, 12]
KEYBOARD = InlineKeyboardMarkup([[InlineKeyboardButton("ok", callback_data="x")]])


@pytest.fixture(autouse=True)
def _timedelta(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "1")  # else PTB warns on every RetryAfter


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


@pytest.fixture
async def bot(api: localapi.LocalBotApi) -> AsyncIterator[Bot]:
    async with Bot(TOKEN, base_url=api.base_url) as opened:
        yield opened


def make_sender(store: db.Store, bot: Bot) -> sender.Sender:
    return sender.Sender(store, bot, lambda row: CHATS, lambda row: KEYBOARD)


async def card_row(store: db.Store, now: datetime, text: str = "the draft <b>") -> int:
    item = await items.create(store, "news", "s", "g1", {"title": "T"}, now)
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
    assert await make_sender(store, bot).send_due(now) == 1
    row = await outbox.get(store, row_id)
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
    the_sender = make_sender(store, bot)
    assert await the_sender.send_due(now) == 0
    row = await outbox.get(store, row_id)
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

    assert sender.retry_after_seconds(error.RetryAfter(5)) == 5.0
    assert sender.retry_after_seconds(error.RetryAfter(timedelta(seconds=2.5))) == 2.5


async def test_a_card_edit_counts_not_modified_as_success(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    row_id = await card_row(store, now)
    the_sender = make_sender(store, bot)
    await the_sender.send_due(now)
    card = await outbox.get(store, row_id)
    assert card.item_id is not None
    edit = {"attempt": 1, "version": 1, "state": "approved", "status": "✅ approved by 11"}
    edit_id = await outbox.enqueue(
        store, "card_edit", outbox.OPERATORS, edit, now, item_id=card.item_id
    )
    assert edit_id is not None
    api.fail_next("editMessageText", 400, description="Bad Request: message is not modified")
    assert await the_sender.flush_item(card.item_id, now) == 1
    assert (await outbox.get(store, edit_id)).state == "sent"
    # One chat answered "not modified"; the other shows the decision, without buttons.
    unchanged, edited = (api.sent(chat)[0] for chat in CHATS)
    assert "✅ approved by 11" not in unchanged.text and unchanged.reply_markup is not None
    assert "✅ approved by 11" in edited.text and edited.reply_markup is None


async def test_rows_pending_at_a_crash_are_sent_by_the_next_process(
    data_dir: Path, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    config = db.StoreConfig(data_dir=data_dir)
    first = await db.Store.open(config)
    row_id = await card_row(first, now)
    await first.close()  # the process ended before the sender ran
    second = await db.Store.open(config)
    try:
        assert await make_sender(second, bot).send_due(now) == 1
        assert (await outbox.get(second, row_id)).state == "sent"
    finally:
        await second.close()
    assert [len(api.sent(chat)) for chat in CHATS] == [1, 1]


async def test_an_alert_goes_once_with_its_message_id(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    payload = {"text": "budget <80%> used", "level": "warning"}
    row_id = await outbox.enqueue(store, "alert", outbox.ALERTS, payload, now)
    assert row_id is not None
    the_sender = make_sender(store, bot)
    assert await the_sender.send_due(now) == 1
    assert await the_sender.send_due(now) == 0
    [message] = api.sent(11)
    assert message.text == "⚠️ budget <80%> used"
    row = await outbox.get(store, row_id)
    assert json.loads(row.external_id or "")["11"] == [message.message_id]
