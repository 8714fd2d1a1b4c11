"""The Telegram messages a sent outbox row became, and the cards an edit or a reply
points at. A row's `external_id` holds {"<chat id>": [message ids]}; a card split into
several messages lists them all.
"""

from __future__ import annotations

import json
from typing import Any

from telegram import error as tg_error

from store import outbox, payloads
from store.db import Store

Sent = dict[str, list[int]]
#: The id recorded for a message Telegram took but whose answer could not be read
#: (Telegram's message ids start at 1).
UNREAD = 0


def message_ids(row: outbox.Row) -> Sent:
    """The messages a sent row became: {"<chat id>": [message ids]}."""
    found: Sent = json.loads(row.external_id) if row.external_id else {}
    return found


async def cards_for(store: Store, item_id: int, edit: dict[str, Any]) -> list[outbox.Row]:
    """The cards showing the version the edit is about (else the newest one)."""
    cards = [c for c in await outbox.for_item(store, item_id, "card") if c.state != "failed"]
    wanted = (edit.get("attempt"), edit.get("version"))
    found = [c for c in cards if (c.payload.get("attempt"), c.payload.get("version")) == wanted]
    return found or cards[:1]


async def earlier_copies(store: Store, card: outbox.Row) -> dict[str, tuple[outbox.Row, int]]:
    """chat -> the copy of the card's version sent there before `card` (the newest such)
    and its last message: what a card sent again answers, and edits to point to it."""
    assert card.item_id is not None, "a card row names its item"
    shown = (card.payload.get("attempt"), card.payload.get("version"))
    found: dict[str, tuple[outbox.Row, int]] = {}
    for row in await outbox.for_item(store, card.item_id, "card"):  # newest first
        if row.id >= card.id or row.state != "sent":
            continue
        if (row.payload.get("attempt"), row.payload.get("version")) != shown:
            continue
        for chat, ids in message_ids(row).items():
            if ids and ids[-1] != UNREAD:
                found.setdefault(chat, (row, ids[-1]))
    return found


async def replies_to(store: Store, row: outbox.Row) -> dict[str, int]:
    """chat -> the message a row's first part answers: for a card sent again, its earlier
    copy there; for an alert about one item, the card of the version it names, else the
    item's newest card. Chats without one get none."""
    if row.item_id is None or row.kind not in ("card", "alert"):
        return {}
    if row.kind == "card":
        if not row.payload.get("again_of"):
            return {}
        return {chat: found for chat, (_, found) in (await earlier_copies(store, row)).items()}
    alert = payloads.Alert.of(row)
    edit = {"attempt": alert.attempt, "version": alert.reply_to_version}
    found: dict[str, int] = {}
    for card in await cards_for(store, row.item_id, edit):
        for chat, ids in message_ids(card).items():
            if ids and ids[-1] != UNREAD:
                found.setdefault(chat, ids[-1])
    return found


class Moved(Exception):
    """Telegram moved the chat (a group upgraded to a supergroup): send again to `new`."""

    def __init__(self, old: int, new: int) -> None:
        super().__init__(f"group {old} became supergroup {new}")
        self.old = old
        self.new = new


#: Telegram's words when a group will not take the bot's messages (removed, no right to
#: post, a topic gone), as opposed to a message of ours it could not read.
_REFUSALS = (
    "not enough rights",
    "have no rights",
    "chat not found",
    "thread not found",
    "chat_write_forbidden",
    "topic_closed",
)


def refused_by_chat(exc: tg_error.TelegramError) -> bool:
    """Whether the chat itself refuses the bot (403, or a 400 about its rights)."""
    text = exc.message.lower()
    return isinstance(exc, tg_error.Forbidden) or any(word in text for word in _REFUSALS)


def not_modified(exc: tg_error.BadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


def gone(exc: tg_error.TelegramError) -> bool:
    """Telegram's answer for a message that was deleted (or never was)."""
    return "not found" in exc.message.lower()
