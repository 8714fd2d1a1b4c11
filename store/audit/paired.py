"""What an item's move writes with it: its paired event and the outbox rows it causes.

    cursor = conn.execute(Q["move"], {..., "queue": paired.queue_json(queue, now)})
    paired.follow(conn, [(item.id, item.state, item.attempt)], cursor.fetchall(), to, ...)

On PostgreSQL the move's own statement writes both (store/sql/postgres/items.sql: its
moves are data-modifying CTEs, one round trip where there were one per event and row).
SQLite cannot write inside WITH, so there `follow` writes each with a statement of its
own after the move (`backend.chains_writes` tells which).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from store import backend, outbox
from store.audit import events
from store.machine import State


def queue_json(queue: Sequence[outbox.Queued], now: datetime) -> str:
    """The rows to queue with a move, as its statement's :queue parameter takes them."""
    return json.dumps([row.fields(now) for row in queue])


def follow(
    conn: backend.Conn,
    moved: Sequence[tuple[int, State | None, int]],
    rows: Sequence[backend.Row],
    to: State,
    actor: str,
    now: datetime,
    reason: str | None,
    queue: Sequence[outbox.Queued],
) -> None:
    """Complete moves just made (`moved`: id, state left, attempt; `rows`: what their
    statement returned): each one's event and its rows of `queue`, and the wake-up of
    the workers of the rows queued."""
    if backend.chains_writes(conn):  # the move wrote them, and names the kinds it queued
        for row in rows:
            for kind in row["queued"]:
                outbox.announce_sync(conn, kind)
        return
    if len(moved) == 1:
        [(item_id, old, attempt)] = moved
        events.append(conn, "item", item_id, old, to, actor, now, attempt=attempt, reason=reason)
    else:
        events.append_many(conn, "item", moved, to, actor, now, reason=reason)
    ids = {item_id for item_id, _, _ in moved}
    for queued in queue:
        if queued.item_id in ids:
            outbox.put_sync(conn, queued, now)
