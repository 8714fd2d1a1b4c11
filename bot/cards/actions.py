"""Reaching an item's card from anywhere: "Show card" buttons (in /pending), replies that
name an item sent as replies to its card, and the pieces the card's tap handlers share.

    markup = card_actions.show_buttons(key, waiting)              # under /pending
    await card_actions.reply_about(update, store, item_id, text)  # a reply to the card
    found = await card_actions.card_message(store, item, chat_id) # the Show card tap's
    await card_actions.settle_reply(query)                       # a decided warning's buttons

Telegram cannot link to a message in a private chat, but a reply quotes it, and tapping
the quote scrolls to it. When the card is gone (deleted, a cleared chat), Telegram says
so to the reply, and a fresh card for this chat is queued instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from telegram import (
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    Update,
)
from telegram import error as tg_error
from telegram.constants import ParseMode

from bot.chat import render, sent_messages, wording
from bot.ground import callbacks
from pipelines.text import telegram as telegram_text
from store import errors, items, outbox
from store.db import Store
from store.review import followups

log = logging.getLogger(__name__)

#: Show card buttons under one /pending reply, at most (a phone screen's worth).
SHOWN_BUTTONS = 24
#: Buttons per row on a phone.
PER_ROW = 3


def _button(
    key: bytes, label: str, action: callbacks.Action, item: items.Item
) -> InlineKeyboardButton:
    data = callbacks.encode(key, callbacks.Button(action, item.id, item.attempt, item.version))
    return InlineKeyboardButton(label, callback_data=data)


def show_buttons(key: bytes, waiting: Sequence[items.Item]) -> InlineKeyboardMarkup | None:
    """One "🔎 item N" button per listed item."""
    buttons = [_button(key, f"🔎 item {item.id}", "show", item) for item in waiting[:SHOWN_BUTTONS]]
    if not buttons:
        return None
    return InlineKeyboardMarkup([buttons[i : i + PER_ROW] for i in range(0, len(buttons), PER_ROW)])


def edit_prompt(item: items.Item, draft_text: str) -> str:
    """The Edit prompt: the current draft in a block Telegram copies with one tap."""
    head = (
        f"✏️ item {item.id}, version {item.version}: tap the draft to copy it, change it, "
        "and send it as a reply to this message."
    )
    block = f"{head}\n\n<pre>{render.esc(draft_text)}</pre>"
    if telegram_text.utf16_len(block) <= telegram_text.MAX_MESSAGE:
        return block
    return f"{head}\n\n(The draft is too long to repeat here: copy it from its card.)"


def item_row(
    key: bytes, shown: followups.Shown, *buttons: tuple[str, callbacks.Action]
) -> InlineKeyboardMarkup:
    """One row of buttons bound to an item's attempt and version: (label, action) each."""
    row = [
        InlineKeyboardButton(
            label, callback_data=callbacks.encode(key, callbacks.Button(action, *shown))
        )
        for label, action in buttons
    ]
    return InlineKeyboardMarkup([row])


def replay_keyboard(key: bytes, shown: followups.Shown) -> InlineKeyboardMarkup:
    """Under an expired card or a breach alert: bring the item back, as /replay does."""
    return item_row(key, shown, ("🔁 Replay", "replay"))


async def settle_reply(query: CallbackQuery) -> None:
    """A decision taken on a reply about the item (an SLA warning) takes that reply's
    buttons away; the card itself says what happened (its edit is the sender's). A card
    is never a reply, so the tapped message being one tells them apart."""
    if tapped(query).reply_to_message is None:
        return
    try:
        await query.edit_message_reply_markup(reply_markup=None)
    except tg_error.BadRequest as exc:
        if not (sent_messages.not_modified(exc) or sent_messages.gone(exc)):
            raise


def tapped(query: CallbackQuery) -> Message:
    """The message under the tapped button; Telegram leaves it out once it is too old."""
    if not isinstance(query.message, Message):
        raise errors.Refused("This message is too old for the bot to read: /pending lists again.")
    return query.message


async def replace_buttons(query: CallbackQuery, markup: InlineKeyboardMarkup | None) -> None:
    """Replace the buttons under the tapped message; the same buttons again (a double
    tap) is no error."""
    try:
        await query.edit_message_reply_markup(markup)
    except tg_error.BadRequest as exc:
        if not sent_messages.not_modified(exc):
            raise


def short(text: str) -> str:
    """A tap's answer: Telegram shows at most 200 characters of it."""
    return text if len(text) <= 190 else text[:187] + "..."


def addressed(query: CallbackQuery, text: str) -> str:
    """A prompt's HTML, naming the operator who tapped when the chat is a group: a
    selective ForceReply then opens the reply box for them alone."""
    if tapped(query).chat.type == "private":
        return text
    user = query.from_user
    return f'<a href="tg://user?id={user.id}">{render.esc(user.first_name)}</a>, {text}'


def retry_keyboard(key: bytes, shown: followups.Shown) -> InlineKeyboardMarkup:
    return item_row(key, shown, ("🔁 Retry", "retry"))


async def card_message(store: Store, item: items.Item, chat_id: int) -> int | None:
    """The newest message in this chat showing the item's card (its current version's
    first, else any), or None."""
    rows = await outbox.for_item(store, item.id, "card")
    current = [
        r
        for r in rows
        if (r.payload.get("attempt"), r.payload.get("version")) == (item.attempt, item.version)
    ]
    for row in [*current, *rows]:
        ids = sent_messages.message_ids(row).get(str(chat_id))
        if ids and ids[-1] != sent_messages.UNREAD:
            return ids[-1]
    return None


async def reply_about(
    update: Update,
    store: Store,
    item_id: int,
    text: str,
    markup: InlineKeyboardMarkup | None = None,
) -> None:
    """Reply as a reply to the item's card in this chat when there is one."""
    message = update.effective_message
    assert message is not None
    found = await card_message(store, await items.get(store, item_id), message.chat_id)
    quote = ReplyParameters(found, allow_sending_without_reply=True) if found else None
    parts = telegram_text.split(text)
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        await message.get_bot().send_message(
            message.chat_id,
            part,
            parse_mode=ParseMode.HTML,
            reply_markup=markup if last else None,
            reply_parameters=quote if index == 0 else None,
        )


async def quote_card(query: CallbackQuery, item: items.Item, card_id: int) -> bool:
    """Reply to the item's card in the tapped chat; False when Telegram says it is gone."""
    text = f"⬆️ item {item.id} ({item.pipeline}): {wording.state(item.state)}"
    try:
        await (
            tapped(query)
            .get_bot()
            .send_message(tapped(query).chat_id, text, reply_parameters=ReplyParameters(card_id))
        )
    except tg_error.BadRequest as exc:
        if not sent_messages.gone(exc):
            raise
        return False
    return True
