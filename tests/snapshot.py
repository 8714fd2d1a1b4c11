"""Every row of every table in the store, for asserting that a refusal changed nothing.

    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict):
        await store.write(drafts.edit_sync, drafts.Edit(item_id, 1, 7), "late words", now)
    assert await snapshot.tables(store) == before

State, events, outbox, votes, drafts and ledger rows are all compared, so a refusal
that wrote anything anywhere fails the test with the table that changed.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from store import backend, db

Tables = dict[str, list[tuple[Any, ...]]]

#: Liveness, not state: heartbeats, the leader's lease and handled update ids change
#: while a worker merely runs (or reads an update it then refuses).
LIVENESS = ("workers", "leases", "handled_updates")


#: Columns the sealer fills in on its own schedule.
SEAL = {("events", "seq"), ("events", "hash")}

#: The store's tables, by dialect.
TABLE_NAMES = {
    "sqlite": "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
    "ORDER BY name",
    "postgres": "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename",
}


def tables_sync(conn: backend.Conn) -> Tables:
    dialect = "sqlite" if isinstance(conn, sqlite3.Connection) else "postgres"
    names = [row[0] for row in conn.execute(TABLE_NAMES[dialect])]
    return {name: _rows(conn, name) for name in names if name not in LIVENESS}


def _rows(conn: backend.Conn, name: str) -> list[tuple[Any, ...]]:
    """A table's rows sorted by value (WITHOUT ROWID tables have no rowid), the events'
    seal left out: the leader's sealer seals events whenever it runs, not a refusal."""
    cursor = conn.execute(f'SELECT * FROM "{name}"')
    return sorted(
        # A row iterates its values: keys() names the columns.
        (tuple(row[c] for c in row.keys() if (name, c) not in SEAL) for row in cursor.fetchall()),  # noqa: SIM118
        key=repr,
    )


async def tables(store: db.Store) -> Tables:
    """All tables of the store, read through a reader connection."""
    return await store.read(tables_sync)
