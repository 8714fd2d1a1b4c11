"""Items: their rows and reads (store.items.rows), their state machine
(store.items.machine) and their moves (store.items.moves), each move with its event
and the outbox rows it causes (store.items.paired).

    item = await store.write(items.create_sync, "news", "feed", "guid-1", {"title": ...}, now)
    [answer] = await store.write(items.apply, [items.Move(item, State.DRAFTING, "system", now)])

Each `*_sync` function is a unit, or a part of a caller's unit, so rows that belong with
a move (a draft, a vote) commit in the same transaction; a row the move itself causes
goes with it (`Move(..., effects=[outbox.Queued(...)])`), written only if it is made:

    def unit(conn):
        moved = items.apply_one(conn, items.Move(item, State.AWAITING_APPROVAL, "system", now))
        drafts.insert_sync(conn, moved.id, moved.version, ...)
        return moved
    await store.write(unit)
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from store import backend, clock
from store.backends.core import Store
from store.items.machine import State
from store.items.moves import (
    Move,
    Moved,
    Refused,
    Seen,
    Throttled,
    Way,
    Why,
    apply,
    apply_one,
    replay_sync,
    transition_sync,
)
from store.items.rows import (
    Approved,
    Item,
    Q,
    content_hash,
    create_many_sync,
    create_sync,
    get_sync,
    in_state_sync,
    lock_sync,
    lock_with_tells_sync,
    sla_due_sync,
    warn_params,
)

__all__ = [
    "Approved",
    "Item",
    "Move",
    "Moved",
    "Refused",
    "Seen",
    "Throttled",
    "Way",
    "Why",
    "apply",
    "apply_one",
    "approved_since",
    "content_hash",
    "counts",
    "create_many_sync",
    "create_sync",
    "get",
    "get_sync",
    "in_state",
    "in_state_sync",
    "lock_sync",
    "lock_with_tells_sync",
    "replay_sync",
    "sla_due_sync",
    "transition_sync",
    "warn_params",
]


async def get(store: Store, item_id: int) -> Item:
    return await store.read(get_sync, item_id)


async def in_state(
    store: Store, state: State, pipeline: str | None = None, limit: int = 100
) -> list[Item]:
    """Items in one state, the longest-waiting first."""
    return await store.read(in_state_sync, state, pipeline, limit)


async def approved_since(
    store: Store, pipeline: str, since: datetime, limit: int
) -> list[Approved]:
    """A pipeline's drafts approved or dispatched since `since`, the newest first."""
    params = {"pipeline": pipeline, "since": clock.to_ms(since), "exclude": -1, "limit": limit}

    def query(conn: backend.Conn) -> list[Approved]:
        cursor = conn.execute(Q["approved_since"], params)
        return [Approved.from_row(row) for row in cursor.fetchall()]

    return await store.read(query)


async def counts(
    store: Store, pipelines: Iterable[str], states: Iterable[State]
) -> dict[str, dict[State, int]]:
    """pipeline -> state -> number of items, for the pipelines and states asked about.

    Each figure is one range of an index: whole-table grouping read every item at 1M.
    """
    names, wanted = list(pipelines), [State(s) for s in states]

    def query(conn: backend.Conn) -> dict[str, dict[State, int]]:
        return {
            name: {
                state: conn.execute(
                    Q["count_in_state"], {"pipeline": name, "state": state}
                ).fetchone()[0]
                for state in wanted
            }
            for name in names
        }

    return await store.read(query)
