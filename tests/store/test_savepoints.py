"""A savepoint rolled back inside a unit takes its events with it, on either backend
(PostgreSQL keeps a unit's events aside until its commit)."""

from __future__ import annotations

import contextlib
from datetime import datetime

from store import backend, db
from store.audit import events
from store.backends import writer


async def test_events_of_a_rolled_back_savepoint_are_not_written(
    store: db.Store, now: datetime
) -> None:
    def unit(conn: backend.Conn) -> None:
        events.append(conn, "pipeline", "news", None, "before", "cli", now)
        with contextlib.suppress(RuntimeError), writer.savepoint(conn, "part"):
            events.append(conn, "pipeline", "news", None, "undone", "cli", now)
            raise RuntimeError("this part fails alone")
        events.append(conn, "pipeline", "news", None, "after", "cli", now)

    await store.write(unit)
    written = await events.for_entity(store, "pipeline", "news")
    assert [e.to_state for e in written] == ["before", "after"]
    assert (await events.verify_chain(store)).ok
