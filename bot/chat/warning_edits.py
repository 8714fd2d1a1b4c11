"""SLA warnings brought up to date when their item moves on.

A warning ("⏳ item 5 (news) is waiting for approval, 7 s left", with Approve, Reject
and Extend) is true only while its version waits. When a card edit says the version
was decided, expired, replaced by an edit or given more time, each warning sent about
that version is edited in place: its buttons go and its text says what happened.

    await warning_edits.settle(store, bot, card_edit_row)   # from bot.chat.edits
"""

from __future__ import annotations

import logging
from typing import Any

from telegram import Bot
from telegram import error as tg_error
from telegram.constants import ParseMode

from bot.chat import people, render, sent_messages
from bot.chat.sent_messages import UNREAD
from store import outbox, payloads
from store.db import Store

log = logging.getLogger(__name__)

#: Status lines of edits after which a warning's countdown is no longer true, though the
#: item still waits: a new version (its warning's buttons are out of date) and Extend.
_STILL_WAITING_BUT_MOVED = ("✏️", "⏳")


def moved_on(edit: dict[str, Any]) -> bool:
    """Whether a card edit's payload ends what a warning about its version said (a
    quorum vote does not: the version still waits, on the same deadline)."""
    waiting = edit.get("state") == "awaiting_approval"
    return not waiting or str(edit.get("status", "")).startswith(_STILL_WAITING_BUT_MOVED)


async def settle(store: Store, bot: Bot, row: outbox.Row) -> None:
    """Edit each sent warning about the version `row` (a card_edit) is about, if the
    edit moved that version on: no buttons, and the edit's status line as its text."""
    if row.item_id is None or not moved_on(row.payload):
        return
    status = await people.humanize(store, str(row.payload.get("status", "")))
    version = (row.payload.get("attempt"), row.payload.get("version"))
    for warning in await _warnings(store, row.item_id, version):
        pipeline = payloads.Alert.of(warning).pipeline
        text = f"⏳ item {row.item_id} ({pipeline}) was waiting for approval: {status}"
        for chat, ids in sent_messages.message_ids(warning).items():
            if ids and ids[-1] != UNREAD:
                await _edit(bot, int(chat), ids[-1], render.esc(text))


async def _warnings(store: Store, item_id: int, version: tuple[Any, Any]) -> list[outbox.Row]:
    """The sent warnings with buttons about this (attempt, version) of the item."""
    found = []
    for row in await outbox.for_item(store, item_id, "alert"):
        alert = payloads.Alert.of(row)
        about = (alert.attempt, alert.reply_to_version) == version
        if row.state == "sent" and alert.buttons == payloads.DECIDE_BUTTONS and about:
            found.append(row)
    return found


async def _edit(bot: Bot, chat: int, message_id: int, text: str) -> None:
    try:
        await bot.edit_message_text(
            text,
            chat_id=chat,
            message_id=message_id,
            parse_mode=ParseMode.HTML,
            reply_markup=None,
        )
    except tg_error.ChatMigrated as exc:
        raise sent_messages.Moved(chat, exc.new_chat_id) from exc
    except (tg_error.BadRequest, tg_error.Forbidden) as exc:
        quiet = isinstance(exc, tg_error.BadRequest) and sent_messages.not_modified(exc)
        if not (quiet or sent_messages.gone(exc) or sent_messages.refused_by_chat(exc)):
            raise
        # Deleted, or a chat that no longer lets the bot edit: nothing left to correct.
        log.info("warning in chat %s not edited: %s", chat, exc.message)
