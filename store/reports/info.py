"""A summary of the store for operators: schema version, file sizes, rows written.

Every figure is a read of a header or of one end of an index, so `gatehouse status`
costs the same at a million items as at ten (counting each table's rows read the
whole database).
"""

from __future__ import annotations

from dataclasses import dataclass

from store import backend, sql
from store.backends.core import Store

Q = sql.load("info")

#: Tables rows are never deleted from, keyed by an id that grows by one per row: the
#: highest id is the number of rows. (Outbox and seen ids are pruned, so not listed.)
#: On PostgreSQL an insert that was refused or rolled back skips its id, so there the
#: figure is an upper bound.
COUNTED_BY_ID = ("events", "items", "claims", "pipeline_runs")


@dataclass(frozen=True)
class Info:
    path: str
    schema_version: int
    wal_bytes: int
    #: The database file's pages, and those of them free for reuse (after pruning).
    db_bytes: int
    free_bytes: int
    #: Rows per table in COUNTED_BY_ID.
    rows: dict[str, int]


def info_sync(conn: backend.Conn) -> tuple[int, int, int, dict[str, int]]:
    version = conn.execute(Q["schema_version"]).fetchone()[0]
    db_bytes, free_bytes = conn.execute(Q["size"]).fetchone()
    # Table names come from the constant above, never from input; max(id) reads one
    # end of the table's b-tree.
    rows = {
        name: conn.execute(f'SELECT coalesce(max(id), 0) FROM "{name}"').fetchone()[0]
        for name in COUNTED_BY_ID
    }
    return int(version), int(db_bytes), int(free_bytes), rows


async def info(store: Store) -> Info:
    version, db_bytes, free_bytes, rows = await store.read(info_sync)
    return Info(store.location, version, store.wal_bytes(), db_bytes, free_bytes, rows)
