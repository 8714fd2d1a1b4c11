"""Items a pipeline dropped before anything was drafted: `filtered` by its filter (and any
other such state the machine declares), listed with the reason their event recorded.

    found = await dropped.recent(store, "news", State.FILTERED, 20)
    today = await dropped.count_since(store, "news", State.FILTERED, midnight)
"""

from __future__ import annotations

from datetime import datetime

from store import backend, clock, sql
from store.backends.core import Store
from store.items import Item
from store.items.machine import State

Q = sql.load("dropped")


async def recent(store: Store, pipeline: str, state: State, limit: int) -> list[Item]:
    """The pipeline's items now in `state`, the most recently dropped first."""
    params = {"pipeline": pipeline, "state": State(state).value, "limit": limit}

    def query(conn: backend.Conn) -> list[Item]:
        return [Item.from_row(row) for row in conn.execute(Q["recent"], params).fetchall()]

    return await store.read(query)


async def count_since(store: Store, pipeline: str, state: State, since: datetime) -> int:
    """How many of the pipeline's items entered `state` since `since` and are still in it
    (one brought back by /replay is no longer counted)."""
    params = {"pipeline": pipeline, "state": State(state).value, "since": clock.to_ms(since)}

    def query(conn: backend.Conn) -> int:
        found: int = conn.execute(Q["count_since"], params).fetchone()[0]
        return found

    return await store.read(query)
