"""Edit prompts the bot has asked: which item and draft version a reply replaces.

    await prompts.remember(store, prompts.Message(chat_id, message_id), item_id, version, now)
    asked = await prompts.get(store, chat_id, reply_to_message_id)   # None: not open
    await prompts.forget(store, chat_id, reply_to_message_id)

Kept in the store so an operator's reply after a restart still works. A prompt is
recorded once Telegram has answered with its message id: a crash in between leaves a
prompt with no row, and its reply is refused with a hint to tap Edit again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from store import backend, clock, sql
from store.backends.core import Store

Q = sql.load("prompts")
#: How long an unanswered prompt stays open.
KEEP = timedelta(days=7)


class Message(NamedTuple):
    """A message in a chat, as Telegram names it: a prompt the bot asked, a card it sent."""

    chat_id: int
    message_id: int


@dataclass(frozen=True)
class Prompt(backend.Record):
    chat_id: int
    message_id: int
    item_id: int
    version: int
    created_at: datetime


def remember_sync(
    conn: backend.Conn, message: Message, item_id: int, version: int, now: datetime
) -> None:
    """Record a prompt, and forget those older than KEEP (the table stays small)."""
    conn.execute(Q["forget_older"], {"before": clock.to_ms(now - KEEP)})
    params = {
        "chat_id": message.chat_id,
        "message_id": message.message_id,
        "item_id": item_id,
        "version": version,
        "now": clock.to_ms(now),
    }
    conn.execute(Q["open"], params)


async def remember(
    store: Store, message: Message, item_id: int, version: int, now: datetime
) -> None:
    await store.write(remember_sync, message, item_id, version, now)


def get_sync(conn: backend.Conn, chat_id: int, message_id: int) -> Prompt | None:
    params = {"chat_id": chat_id, "message_id": message_id}
    return backend.fetch_one(conn, Q["get"], params, Prompt.from_row)


async def get(store: Store, chat_id: int, message_id: int) -> Prompt | None:
    return await store.read(get_sync, chat_id, message_id)


async def forget(store: Store, chat_id: int, message_id: int) -> None:
    params = {"chat_id": chat_id, "message_id": message_id}
    await store.write(lambda conn: conn.execute(Q["close"], params))
