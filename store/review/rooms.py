"""Where a group's cards live when the group changes: forum topics the bot created by
name, and groups Telegram moved to a supergroup.

    thread = await rooms.topic(store, chat_id, "news")          # None: not created yet
    await rooms.add_topic(store, chat_id, "news", thread, now)
    await rooms.move_chat(store, old_id, new_id, now)           # every reference moves
    moves = await rooms.moves(store)                            # {old id: new id}

A move is one transaction: the cards' message references (outbox external_id, keyed by
chat), the open prompts and the recorded move itself, so a crash leaves all or none.
"""

from __future__ import annotations

import json
from datetime import datetime

from store import backend, clock, sql
from store.db import Store

Q = sql.load("rooms")


async def topic(store: Store, chat_id: int, name: str) -> int | None:
    params = {"chat_id": chat_id, "name": name}
    row = await store.read(lambda conn: conn.execute(Q["topic"], params).fetchone())
    return None if row is None else int(row[0])


async def add_topic(store: Store, chat_id: int, name: str, thread_id: int, now: datetime) -> int:
    """Remember a created topic; the thread id kept (an earlier creation's wins)."""
    params = {"chat_id": chat_id, "name": name, "thread_id": thread_id, "now": clock.to_ms(now)}

    def unit(conn: backend.Conn) -> int:
        conn.execute(Q["add_topic"], params)
        return int(conn.execute(Q["topic"], params).fetchone()[0])

    return await store.write(unit)


async def moves(store: Store) -> dict[int, int]:
    rows = await store.read(lambda conn: conn.execute(Q["moves"]).fetchall())
    return {int(old): int(new) for old, new in rows}


def move_chat_sync(conn: backend.Conn, old_id: int, new_id: int, now: datetime) -> int:
    """Move every reference to `old_id` to `new_id`; returns the outbox rows changed."""
    ids = {"old_id": old_id, "new_id": new_id}
    conn.execute(Q["add_move"], {**ids, "now": clock.to_ms(now)})
    for name in ("follow_move", "move_edit_prompts", "move_reply_prompts"):
        conn.execute(Q[name], ids)
    changed = 0
    for row_id, external_id in conn.execute(Q["sent_to"], {"pattern": f'%"{old_id}"%'}).fetchall():
        sent: dict[str, list[int]] = json.loads(external_id)
        if str(old_id) not in sent:
            continue
        sent[str(new_id)] = sent.pop(str(old_id))
        conn.execute(Q["set_sent"], {"id": row_id, "external_id": json.dumps(sent)})
        changed += 1
    return changed


async def move_chat(store: Store, old_id: int, new_id: int, now: datetime) -> int:
    return await store.write(move_chat_sync, old_id, new_id, now)
