"""The PostgreSQL store: the same units on psycopg 3 connections, several writers at once.

`db.open(config)` returns this store when `config.database_url` is set. Each
lane is a thread owning one synchronous psycopg connection (autocommit, so a unit's
`BEGIN ... COMMIT` is explicit as on SQLite; statements run often are prepared, unless
`prepared_statements` is off for a pooler that cannot keep them). A write runs on a free
lane in a READ COMMITTED transaction, which the units waiting beside it share
(store.backends.pg_writers): a few run at once, here and in other processes, so the repositories
lock what they decide on (see docs/architecture.md, "PostgreSQL inside"). A unit that
loses a deadlock or a serialization check runs again from the start: units are database
work only.

A unit writes its audit events unsealed; the leader seals them into the chain later
(store.audit.sealer), so writers share no lock for the chain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from store import backend, errors, sql
from store.backends import core, migrate, notify, pg_writers, writer
from store.backends.lanes import Lane
from store.backends.pg_conn import Conn, connect

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The advisory lock key under which one process applies migrations ("gh-migrt").
MIGRATE_LOCK = 0x67682D6D69677274
MIGRATIONS_DIR = sql.POSTGRES_DIR / "migrations"


def _read(conn: Conn, query: Callable[[Conn], T]) -> T:
    conn.reopen_if_dropped()
    try:
        return query(conn)
    except psycopg.OperationalError:
        if not conn.raw.closed:
            raise
        # The server dropped the connection under the read (a restart, a failover,
        # pg_terminate_backend); a read changes nothing, so it runs again, once.
        conn.reopen_if_dropped()
        return query(conn)


def run_batch(conn: Conn, units: list[pg_writers.Unit]) -> list[tuple[bool, Any]]:
    """Run units in one transaction, each in a savepoint when one fails (as on SQLite)."""
    conn.reopen_if_dropped()
    conn.batch_size = len(units)
    try:
        return writer.run_batch(conn, units, begin="BEGIN")
    finally:
        conn.batch_size = 1


def apply_migrations(conn: Conn, directory: Path = MIGRATIONS_DIR) -> list[int]:
    """Apply each missing migration in its own transaction, numbered as SQLite's.

    Several workers may start at once: each migration runs under an advisory lock,
    and whoever takes it second finds the migration applied.
    """
    migrations = migrate.discover(directory)
    newest_known = migrations[-1].version if migrations else 0
    applied = []
    for migration in migrations:
        with _migrating(conn, migration) as done:
            if max(done, default=0) > newest_known:
                raise errors.MigrationError(
                    f"the database is at schema version {max(done)}, newer than this "
                    f"gatehouse knows ({newest_known}); upgrade gatehouse instead"
                )
            if migration.version in done:
                continue
            conn.script(migration.path.read_text(encoding="utf-8"))
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                # Wall-clock bookkeeping only; nothing reads it back into logic.
                (migration.version, migration.name, int(time.time() * 1000)),
            )
            applied.append(migration.version)
    return applied


@contextlib.contextmanager
def _migrating(conn: Conn, migration: migrate.Migration) -> Iterator[set[int]]:
    """One migration's transaction, under the lock; yields the versions applied."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(:key)", {"key": MIGRATE_LOCK})
        conn.execute(migrate.BOOKKEEPING.replace("INTEGER", "BIGINT"))
        yield {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        translated = errors.translate_postgres(exc) if isinstance(exc, Exception) else None
        if translated is not None:
            raise errors.MigrationError(
                f"migration {migration.path.name} failed: {translated}"
            ) from exc
        raise


#: True where the database orders text by code point, as SQLite does ('B' 66 < 'Z' 90
#: < '_' 95 < 'a' 97); a language's collation puts '_' first and 'a' before 'B'.
_CODE_POINT_ORDER = "SELECT 'B' < 'Z' AND 'Z' < '_' AND '_' < 'a'"


def _check_collation(conn: Conn) -> bool:
    """Lists sorted by name (scopes, pipelines) follow the database's collation: say so
    when it is not SQLite's code point order, which whoever created the database chose."""
    by_code_point = bool(conn.execute(_CODE_POINT_ORDER).fetchone()[0])
    if not by_code_point:
        log.warning(
            "the database does not sort text by code point as SQLite does: names may list "
            "in another order (create it with LOCALE 'C.UTF-8' to match)"
        )
    return by_code_point


class PgStore(core.Store):
    """The store in a PostgreSQL database shared by any number of gatehouse processes."""

    dialect = "postgres"
    shared = True

    def __init__(self, config: core.StoreConfig, readonly: bool) -> None:
        super().__init__(config, readonly)
        translate = errors.translate_postgres
        count = 0 if readonly else config.writers
        self._writers: list[Lane[Conn]] = [
            Lane(f"store-pg-writer-{i}", translate) for i in range(count)
        ]
        self._batches = pg_writers.Writers(self._writers, self.faults, run_batch)
        #: `write_now`'s lane: the leader's lease and the heartbeat never queue behind
        #: this process's own units, nor wait for a lane a long unit holds.
        self._urgent: Lane[Conn] | None = (
            None if readonly else Lane("store-pg-urgent-writer", translate)
        )
        self._readers: list[Lane[Conn]] = [
            Lane(f"store-pg-reader-{i}", translate) for i in range(config.readers)
        ]
        self._next_reader = 0
        self._listener: notify.Listener | None = None
        self._listening: dict[str, list[asyncio.Event]] = {}

    @property
    def location(self) -> str:
        info = psycopg.conninfo.conninfo_to_dict(self._url)
        host, port, name = info.get("host", "localhost"), info.get("port", 5432), info.get("dbname")
        return f"postgresql://{host}:{port}/{name}"

    @property
    def _url(self) -> str:
        assert self.config.database_url, "PgStore opens only with a database URL"
        return self.config.database_url

    async def _open(self) -> None:
        url, prepared = self._url, self.config.prepared_statements
        for lane in self._writers:
            await lane.open(lambda: connect(url, prepared=prepared))
        if self._writers:
            await self._writers[0].run(apply_migrations)
            await self._writers[0].run(_check_collation)
        if self._urgent is not None:
            await self._urgent.open(lambda: connect(url, prepared=prepared))
        for lane in self._readers:
            await lane.open(lambda: connect(url, reader=True, prepared=prepared))

    async def _write(self, unit: Callable[[backend.Conn], T]) -> T:
        result: T = await self._batches.submit(unit)
        return result

    async def _write_now(self, unit: Callable[[backend.Conn], T]) -> T:
        """Run `unit` alone in a transaction on the urgent lane (see `write_now`)."""
        if self._urgent is None:
            raise errors.Closed()
        [(ok, value)] = await self._urgent.run(run_batch, [unit])
        if not ok:
            self.faults.failed(value)
            raise value
        self.faults.committed(full_too=True)
        result: T = value
        return result

    async def _read(self, query: Callable[[backend.Conn], T]) -> T:
        """Run `query(conn)` on a read-only connection (each statement its own snapshot)."""
        lane = self._readers[self._next_reader % len(self._readers)]
        self._next_reader += 1
        return await lane.run(_read, query)

    def listen(self, channel: str, event: asyncio.Event | None = None) -> asyncio.Event:
        """An event (`event`, else a new one) set when any process (this one too) commits
        a notification on `channel`; one LISTENing connection serves every channel."""
        event = event or asyncio.Event()
        self._listening.setdefault(notify.check_channel(channel), []).append(event)
        if self._listener is None:
            self._listener = notify.Listener(self._url, self._woken)
        self._listener.add(channel)
        return event

    def _woken(self, channel: str) -> None:
        for event in self._listening.get(channel, ()):
            event.set()

    async def measure_room(self) -> int:
        """The server's disk is not visible from here: a "full" fault ends at the next
        commit instead, so this reports room only while there is no such fault."""
        full = self.faults.current is not None and self.faults.current.kind == "full"
        return 0 if full else writer.ROOM_BYTES

    async def close(self) -> None:
        self._batches.close()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        urgent = [] if self._urgent is None else [self._urgent]
        for lane in [*self._writers, *urgent, *self._readers]:
            with contextlib.suppress(errors.StoreError):
                await lane.close()
