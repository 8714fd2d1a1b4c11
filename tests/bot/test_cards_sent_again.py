"""A card sent again as a new message (after a restart, or for a chat that lost it) answers
its old copy, and the old copy is edited to say so, without buttons: through the real
sender, a real store and the local Bot API server. The edit waits in the outbox for the
new card, survives a restart between the two, and is done when Telegram says the old
copy is unchanged or gone; decisions then edit the new copy, not the old one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Update

from bot import app as bot_app
from bot import settings as settings_mod
from bot.chat import auth, card_text, edits, kit, sender
from bot.demo.botapi import localapi
from bot.demo.botapi.state import ChatMessage
from bot.ground import callbacks
from pipelines.approval import card_trail, flow, rule
from store import db, drafts, items, outbox
from store.review.followups import Shown
from tests.pipelines import test_review

TOKEN = "555222:sent-again-test-token_abcdefghijklm"
CHATS = [11, 12]
KEYBOARD = InlineKeyboardMarkup([[InlineKeyboardButton("Approve", callback_data="x")]])
KEY = b"k" * 32


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


def make_sender(store: db.Store, bot: Bot, now: datetime) -> sender.Sender:
    """The bot's sender, as bot.app builds it: cards to the row's chat or every operator."""

    def targets(row: outbox.Row) -> list[int]:
        one = row.target.removeprefix(card_trail.CHAT_TARGET)
        return [int(one)] if one != row.target else CHATS

    return sender.Sender(store, bot, targets, card_buttons, clock=lambda: now)


def card_buttons(row: outbox.Row) -> InlineKeyboardMarkup | None:
    return KEYBOARD if row.kind == "card" else None


async def sent_card(store: db.Store, bot: Bot, now: datetime) -> items.Item:
    """An item awaiting approval whose card reached both chats."""
    item = await test_review.awaiting(store, now)

    def unit(conn: Any) -> int | None:
        draft = drafts.get_sync(conn, item.id, item.version)
        return flow.queue_card(conn, test_review.pipeline(), item, flow.Card(draft), now)

    await store.write(unit)
    assert await make_sender(store, bot, now).send_due(now) == 1
    return item


def copies(api: localapi.LocalBotApi, chat: int) -> list[ChatMessage]:
    return [m for m in api.sent(chat) if "draft text" in m.text]


def last_reply(api: localapi.LocalBotApi) -> dict[str, Any]:
    """The reply_parameters of the last message sent, as they went over the wire."""
    found: dict[str, Any] = json.loads(api.calls("sendMessage")[-1].params["reply_parameters"])
    return found


def pointed(old: ChatMessage, new: ChatMessage) -> bool:
    """The new copy answers the old one, and the old one says so, with no buttons."""
    return (
        new.reply_to_message_id == old.message_id
        and old.text.endswith(card_text.SENT_AGAIN)
        and old.reply_markup is None
        and card_text.SENT_AGAIN not in new.text
        and new.reply_markup == KEYBOARD.to_dict()
    )


async def test_open_cards_sent_again_after_a_restart_answer_and_retire_their_old_copies(
    data_dir: Path, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    first = await db.open(db.StoreConfig(data_dir=data_dir))
    item = await sent_card(first, bot, now)
    await first.close()  # the restart

    later = now + timedelta(minutes=1)
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        assert await card_trail.resend_open(store, later) == [item.id]
        assert await make_sender(store, bot, later).send_due(later) == 2  # the card, the edit
        for chat in CHATS:
            old, new = copies(api, chat)
            assert pointed(old, new), (old, new)
        assert last_reply(api)["allow_sending_without_reply"] is True

        # The decision edits the live copy; the old one keeps pointing to it.
        await flow.decide(
            store,
            test_review.pipeline(),
            rule.Vote(Shown(item.id, 1, 1), CHATS[0], "approve"),
            later,
        )
        assert await make_sender(store, bot, later).send_due(later) == 1
        for chat in CHATS:
            old, new = copies(api, chat)
            assert "approved by" in new.text and old.text.endswith(card_text.SENT_AGAIN)
    finally:
        await store.close()


async def test_a_restart_between_the_new_card_and_the_edit_loses_nothing_and_sends_once(
    data_dir: Path, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        item = await sent_card(store, bot, now)
        await card_trail.resend_open(store, now)
        [edit] = await outbox.for_item(store, item.id, "card_edit")
        card = (await outbox.for_item(store, item.id, "card"))[0]
        assert await make_sender(store, bot, now).send_row(card, now)
    finally:
        await store.close()  # killed once the card was recorded, before its edit

    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        assert await make_sender(store, bot, now).send_due(now) == 1
        assert (await store.read(outbox.get_sync, edit.id)).state == "sent"
        for chat in CHATS:
            old, new = copies(api, chat)  # two copies: the card did not go again
            assert pointed(old, new)
        # Done again (an edit cut off before it was recorded): Telegram's "not modified".
        again = await edits.edit(store, bot, card_buttons, edit)
        assert again == {str(chat): [copies(api, chat)[0].message_id] for chat in CHATS}
    finally:
        await store.close()


async def test_a_fresh_card_for_one_chat_answers_and_retires_the_copy_there_only(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    item = await sent_card(store, bot, now)
    assert await card_trail.show_again(store, item.id, CHATS[0], now) is not None
    assert await make_sender(store, bot, now).send_due(now) == 2
    old, new = copies(api, CHATS[0])
    assert pointed(old, new)
    [other] = copies(api, CHATS[1])
    assert other.reply_markup == KEYBOARD.to_dict() and other.edit_date is None

    await flow.decide(
        store, test_review.pipeline(), rule.Vote(Shown(item.id, 1, 1), CHATS[0], "approve"), now
    )
    assert await make_sender(store, bot, now).send_due(now) == 1
    old, new = copies(api, CHATS[0])
    [other] = copies(api, CHATS[1])
    assert "approved by" in new.text and "approved by" in other.text
    assert old.text.endswith(card_text.SENT_AGAIN)


# -- the Show card tap, through the bot's own handler ------------------------------------


@pytest.fixture
async def application(
    tmp_path: Path, api: localapi.LocalBotApi, store: db.Store, bot: Bot, now: datetime
) -> AsyncIterator[bot_app.App]:
    """The bot's own application (its handlers as bot.app registers them) on the local API."""
    (tmp_path / "pipelines").mkdir()
    cfg = settings_mod.Settings(
        data_dir=tmp_path / "data",
        pipelines_dir=tmp_path / "pipelines",
        telegram=settings_mod.TelegramSettings(
            token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
            base_url=api.base_url,
            operators=CHATS,
        ),
    )
    built = bot_app.build(cfg, TOKEN)
    built.bot_data["deps"] = kit.Deps(
        store, {"news": test_review.pipeline()}, None, auth.Gate(CHATS, 0), KEY,
        make_sender(store, bot, now), lambda: now,
    )  # fmt: skip
    async with built:
        yield built


async def test_show_card_after_the_card_was_deleted_sends_a_fresh_one_and_the_edit_is_done(
    application: bot_app.App, store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    item = await sent_card(store, bot, now)
    [old] = copies(api, CHATS[0])
    api.state.delete(CHATS[0], old.message_id)  # the operator cleared it
    tapped = await bot.send_message(CHATS[0], "a reminder")
    show = callbacks.encode(KEY, callbacks.Button("show", item.id, 1, 1))
    query_id = api.inject_callback(CHATS[0], CHATS[0], tapped.message_id, show)
    raw = {"update_id": int(query_id), "callback_query": api.state.callback_query(query_id)}
    await application.process_update(Update.de_json(raw, application.bot))
    answer = next(a for a in api.callback_answers() if a["callback_query_id"] == query_id)
    assert answer["text"] == "A fresh card follows."

    assert await make_sender(store, bot, now).send_due(now) == 2
    [fresh] = copies(api, CHATS[0])
    # It answers the old copy where Telegram can; here that is gone, so it stands alone.
    assert last_reply(api) == {
        "message_id": old.message_id,
        "allow_sending_without_reply": True,
    }
    assert fresh.reply_to_message_id is None and fresh.reply_markup == KEYBOARD.to_dict()
    # "message to edit not found" is no failure: the edit is done, with nothing edited.
    edit = (await outbox.for_item(store, item.id, "card_edit"))[0]
    assert (edit.state, edit.attempts, edit.external_id) == ("sent", 1, "{}")
    assert [m.text for m in copies(api, CHATS[1])] == [old.text]
