"""A summary of the store for operators: schema version, sizes, table counts."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from store.db import Store


@dataclass(frozen=True)
class Info:
    path: str
    schema_version: int
    wal_bytes: int
    rows: dict[str, int]


async def info(store: Store) -> Info:
    def query(conn: sqlite3.Connection) -> tuple[int, dict[str, int]]:
        version = conn.execute(
            "SELECT coalesce(max(version), 0) FROM schema_migrations"
        ).fetchone()[0]
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations' ORDER BY name"
            )
        ]
        # Table names come from sqlite_master itself, never from input.
        counts = {
            name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in tables
        }
        return int(version), counts

    version, rows = await store.read(query)
    return Info(str(store.config.db_path), version, store.wal_bytes(), rows)
