"""Editing a card already in the chats: a card_edit row's text and buttons.

    edited = await edits.edit(store, bot, keyboard, row)   # None: its card is not sent yet

The sender (bot.chat.sender) calls this for each card_edit row and records what it returns
as the row's message ids. Every live copy of the card is edited (the first one and any
copy sent again), in place, in each chat: the last part of the card gets the decision's
line and the buttons the edit calls for. SLA warnings about the version are brought up
to date too (bot.chat.warning_edits).

A card sent again (pipelines.approval.card_trail: `again_of`) comes with an edit naming it
(`again_as`): once it is sent, the copy it replaced in each chat it reached says
card_text.SENT_AGAIN, without buttons, and later edits leave that copy alone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from telegram import Bot, InlineKeyboardMarkup, LinkPreviewOptions
from telegram import error as tg_error
from telegram.constants import ParseMode

from bot.chat import card_text, people, sent_messages, warning_edits
from bot.chat.sent_messages import UNREAD, Sent
from pipelines.approval import card_trail
from store import errors, outbox
from store.db import Store
from store.review import prompts

log = logging.getLogger(__name__)

#: row -> the buttons under its last part (None: no buttons): a card's own, a decided
#: card's from its edit (Undo, Redraft), a digest's.
Keyboard = Callable[[outbox.Row], InlineKeyboardMarkup | None]

#: How the status line of a card replaced by a new version begins (pipelines.approval.flow:
#: an operator's edit, an image removed): the old card loses its buttons.
REPLACED = ("✏️", "🖼")

#: Cards show the source link as a link, not as a large preview.
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)


@dataclass(frozen=True)
class Face:
    """What a message shows, sent or edited: its HTML, its link preview and its buttons."""

    text: str
    shows: LinkPreviewOptions
    markup: InlineKeyboardMarkup | None = None


def preview(card: dict[str, Any], index: int) -> LinkPreviewOptions:
    """The link preview of a card's part `index`: the version's image, large and above the
    text, on its first part; none elsewhere. A preview keeps the card one text message,
    so its buttons and every later edit work as for a card without an image; each edit
    passes it again, since an edit without it would drop the picture."""
    image = card.get("image_url")
    if index != 0 or not isinstance(image, str) or not image:
        return NO_PREVIEW
    return LinkPreviewOptions(url=image, show_above_text=True, prefer_large_media=True)


async def edit(store: Store, bot: Bot, keyboard: Keyboard, row: outbox.Row) -> Sent | None:
    """Edit every sent copy of the row's card; the message ids edited, per chat.

    None when a copy of the card is still pending: the edit waits for it. An item with
    no card at all has nothing to edit ({}).
    """
    assert row.item_id is not None, "a card_edit row names its item"
    if row.payload.get("again_as"):
        return await _point_to_copy(store, bot, row, row.item_id, int(row.payload["again_as"]))
    cards = await sent_messages.cards_for(store, row.item_id, row.payload)
    if not cards:
        log.warning("card_edit %d: item %d has no card; nothing to edit", row.id, row.item_id)
        return {}
    if any(card.state == "pending" for card in cards):
        return None
    change = await people.card_payload(store, row.payload)
    edited: Sent = {}
    replaced: set[str] = set()  # chats where a copy sent again took over from the older ones
    for card in cards:  # newest first
        shown = await people.card_payload(store, card.payload)
        parts = card_text.card_parts(row.item_id, shown)
        text = card_text.decided_card(parts[-1], change, row.created_at)
        face = Face(text, preview(shown, len(parts) - 1), _markup(keyboard, row, card))
        # Where a copy sent again took over, that newer copy is edited instead.
        chats = {c: ids for c, ids in sent_messages.message_ids(card).items() if c not in replaced}
        edited.update(await _edit_messages(store, bot, row, chats, face))
        if card.payload.get("again_of"):
            replaced.update(sent_messages.message_ids(card))
    await warning_edits.settle(store, bot, row)  # the replies that counted down to it
    return edited


def _markup(keyboard: Keyboard, row: outbox.Row, card: outbox.Row) -> InlineKeyboardMarkup | None:
    """Quorum progress keeps the card's buttons; a decision, or an edit that replaced
    this version with a new card, takes them away; a failed dispatch offers Retry."""
    if row.payload.get("buttons"):
        return keyboard(row)
    still_open = row.payload.get("state") == "awaiting_approval" and not row.payload.get(
        "status", ""
    ).startswith(REPLACED)
    # A decided card's own buttons (Undo, Redraft) come from the edit.
    return keyboard(card) if still_open else keyboard(row)


async def _edit_messages(store: Store, bot: Bot, row: outbox.Row, chats: Sent, face: Face) -> Sent:
    """Edit the card's message in each of `chats` (chat -> its message ids)."""
    assert row.item_id is not None, "a card_edit row names its item"
    edited: Sent = {}
    for chat, ids in chats.items():
        if not ids or ids[-1] == UNREAD:
            log.warning("card_edit %d: chat %s has no readable message id", row.id, chat)
            continue
        try:
            await bot.edit_message_text(
                face.text,
                chat_id=int(chat),
                message_id=ids[-1],
                parse_mode=ParseMode.HTML,
                reply_markup=face.markup,
                link_preview_options=face.shows,
            )
        except tg_error.ChatMigrated as exc:
            raise sent_messages.Moved(int(chat), exc.new_chat_id) from exc
        except (tg_error.BadRequest, tg_error.Forbidden) as exc:
            if isinstance(exc, tg_error.BadRequest) and sent_messages.not_modified(exc):
                edited[chat] = ids[-1:]
                continue
            if not (sent_messages.gone(exc) or sent_messages.refused_by_chat(exc)):
                raise
            # Deleted (a cleared chat), or a group that no longer lets the bot edit: the
            # edit goes on in the other chats; an open card is sent again where it was lost.
            log.info("card_edit %d: the card in chat %s is gone: %s", row.id, chat, exc.message)
            if sent_messages.gone(exc) and row.payload.get("state") == "awaiting_approval":
                with contextlib.suppress(errors.Conflict):  # decided meanwhile: no card needed
                    await card_trail.show_again(store, row.item_id, int(chat), row.created_at)
            continue
        edited[chat] = ids[-1:]
    return edited


async def _point_to_copy(
    store: Store, bot: Bot, row: outbox.Row, item_id: int, again: int
) -> Sent | None:
    """Edit the earlier copy of a card sent again, in each chat the new card reached, to
    say so, without buttons. None while the new card is pending; nothing if it failed.
    Idempotent: the same text each time, and "not modified" or "not found" is done."""
    try:
        card = await store.read(outbox.get_sync, again)
    except errors.NotFound:
        return {}  # pruned with its ended item: nothing is live to point to
    if card.state == "pending":
        return None
    reached = sent_messages.message_ids(card) if card.state == "sent" else {}
    edited: Sent = {}
    for chat, (earlier, message_id) in (await sent_messages.earlier_copies(store, card)).items():
        if chat not in reached:
            continue  # the new copy is not there (its chat was not a target): leave it
        shown = await people.card_payload(store, earlier.payload)
        parts = card_text.card_parts(item_id, shown)
        text = f"{parts[-1]}\n\n{card_text.SENT_AGAIN}"
        face = Face(text, preview(shown, len(parts) - 1))
        if await _edit_quietly(bot, row, prompts.Message(int(chat), message_id), face):
            edited[chat] = [message_id]
    return edited


async def _edit_quietly(bot: Bot, row: outbox.Row, message: prompts.Message, face: Face) -> bool:
    """Edit one message, without buttons; False if it is gone or its chat refuses the bot."""
    chat, message_id = message
    try:
        await bot.edit_message_text(
            face.text,
            chat_id=chat,
            message_id=message_id,
            parse_mode=ParseMode.HTML,
            reply_markup=None,
            link_preview_options=face.shows,
        )
    except tg_error.ChatMigrated as exc:
        raise sent_messages.Moved(chat, exc.new_chat_id) from exc
    except (tg_error.BadRequest, tg_error.Forbidden) as exc:
        if isinstance(exc, tg_error.BadRequest) and sent_messages.not_modified(exc):
            return True  # edited before a crash, or by a retry
        if not (sent_messages.gone(exc) or sent_messages.refused_by_chat(exc)):
            raise
        log.info("card_edit %d: message %d in chat %s: %s", row.id, message_id, chat, exc.message)
        return False
    return True
