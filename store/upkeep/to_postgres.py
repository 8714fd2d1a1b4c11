"""Copy an SQLite store into an empty PostgreSQL database, then check what arrived.

    report = await to_postgres.copy(sqlite_config, "postgresql://...", progress=print)

The target is migrated to the same schema version first (opening it as a store does
that) and must hold no rows: a copy never merges into live data. Tables are copied
parents first (by their foreign keys), each in batches inside one transaction per
table, with their ids as they were; identity sequences then continue after the
largest id. On arrival every table's row count is compared with the source's and
the audit chain is verified on the PostgreSQL side, link by link: a copy that
changed one byte of one event fails here. The source is read inside one read
transaction, so it is one consistent snapshot; stop gatehouse first anyway, or
what it writes after the snapshot stays behind.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from store import db, errors
from store.audit import events

#: Rows sent to PostgreSQL per round trip.
BATCH = 2000
#: Tables not copied: what the store is rather than what it holds, and the item counts,
#: which the target's triggers build as the items arrive.
BOOKKEEPING = ("schema_migrations", "item_counts")

Progress = Callable[[str], None]


class TargetNotEmpty(errors.StoreError):
    """the PostgreSQL database already holds gatehouse data; copy only into an empty one"""


class SchemaMismatch(errors.StoreError):
    """the two stores are at different schema versions"""


@dataclass(frozen=True)
class Report:
    #: table -> rows copied.
    rows: dict[str, int]
    #: Events whose hash and link were checked on arrival.
    events_checked: int
    schema_version: int
    #: The target, without its password.
    location: str


def _sqlite_tables(conn: sqlite3.Connection) -> dict[str, list[str]]:
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    return {
        name: [col[1] for col in conn.execute(f'PRAGMA table_info("{name}")')] for name in names
    }


def _pg_order(conn: Any) -> list[str]:
    """The target's tables, each after the tables its foreign keys point to."""
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        )
    ]
    parents: dict[str, set[str]] = {name: set() for name in tables}
    for child, parent in conn.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
        " WHERE contype = 'f' AND connamespace = 'public'::regnamespace"
    ):
        if child != parent:
            parents[child].add(parent)
    ordered: list[str] = []
    while parents:
        ready = sorted(name for name, needs in parents.items() if not needs - set(ordered))
        if not ready:
            raise errors.StoreError(f"foreign keys form a cycle among: {', '.join(parents)}")
        ordered += ready
        for name in ready:
            del parents[name]
    return ordered


def _version(rows: Iterator[Any]) -> int:
    return max((int(row[0]) for row in rows), default=0)


def _copy_table(source: sqlite3.Connection, target: Any, table: str, columns: list[str]) -> int:
    quoted = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join(["%s"] * len(columns))
    insert = f'INSERT INTO "{table}" ({quoted}) VALUES ({marks})'
    cursor = source.execute(f'SELECT {quoted} FROM "{table}"')
    copied = 0
    with target.transaction(), target.cursor() as out:
        while batch := cursor.fetchmany(BATCH):
            out.executemany(insert, batch)
            copied += len(batch)
        identity = target.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attidentity != '' AND NOT attisdropped",
            (f'"{table}"',),
        ).fetchall()
        for (column,) in identity:
            target.execute(
                f"SELECT setval(pg_get_serial_sequence(%s, %s),"
                f' coalesce((SELECT max("{column}") FROM "{table}"), 0) + 1, false)',
                (f'"{table}"', column),
            )
    return copied


def _copy_sync(
    sqlite_path: str, url: str, progress: Progress
) -> tuple[dict[str, int], dict[str, int]]:
    """(the source's row counts, the rows copied), both of one snapshot."""
    import psycopg  # only this command and the PostgreSQL store need the driver

    source = sqlite3.connect(f"file:{sqlite_path}?mode=ro", uri=True, isolation_level=None)
    try:
        source.execute("BEGIN")  # one snapshot for every table
        have = _sqlite_tables(source)
        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as target:
            order = _pg_order(target)
            versions = (
                _version(source.execute("SELECT version FROM schema_migrations")),
                _version(target.execute("SELECT version FROM schema_migrations")),
            )
            if versions[0] != versions[1]:
                raise SchemaMismatch(
                    f"the SQLite store is at schema version {versions[0]}, the PostgreSQL"
                    f" database at {versions[1]}; run this gatehouse once on each first"
                )
            for table in order:
                if table in BOOKKEEPING:
                    continue
                if target.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone():
                    raise TargetNotEmpty(
                        f"table {table} of the PostgreSQL database has rows; "
                        "copy only into an empty database"
                    )
            copied: dict[str, int] = {}
            counted = _count_sync(source, [t for t in order if t in have and t not in BOOKKEEPING])
            for table in order:
                if table in BOOKKEEPING or table not in have:
                    continue
                pg_columns = [
                    row[0]
                    for row in target.execute(
                        "SELECT column_name FROM information_schema.columns"
                        " WHERE table_schema = 'public' AND table_name = %s"
                        " ORDER BY ordinal_position",
                        (table,),
                    )
                ]
                columns = [c for c in pg_columns if c in have[table]]
                copied[table] = _copy_table(source, target, table, columns)
                progress(f"{table}: {copied[table]} rows")
        source.execute("ROLLBACK")
        return counted, copied
    finally:
        source.close()


def _count_sync(conn: Any, tables: list[str]) -> dict[str, int]:
    return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables}


async def copy(source: db.StoreConfig, url: str, progress: Progress = lambda _: None) -> Report:
    """Copy the SQLite store of `source` into the empty database at `url`, and verify it."""
    if not source.db_path.exists():
        raise errors.StoreError(f"no SQLite store at {source.db_path}")
    target_cfg = replace(source, database_url=url)
    target = await db.open(target_cfg)  # migrates it to this gatehouse's schema
    await target.close()
    before, copied = await asyncio.to_thread(_copy_sync, str(source.db_path), url, progress)
    target = await db.open(target_cfg, readonly=True)
    try:
        after = await target.read(lambda conn: _count_sync(conn, sorted(copied)))
        chain = await target.read(events.verify_sync)
        version = await target.read(
            lambda conn: _version(iter(conn.execute("SELECT version FROM schema_migrations")))
        )
        location = target.location
    finally:
        await target.close()
    short = {t: (before.get(t), n) for t, n in after.items() if before.get(t) != n}
    if short:
        raise errors.StoreError(f"row counts differ after the copy (source, target): {short}")
    if not chain.ok:
        raise errors.StoreError(f"the audit chain did not arrive intact: {chain.broken}")
    return Report(copied, chain.checked, version, location)
