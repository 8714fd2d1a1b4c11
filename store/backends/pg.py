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
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import pq

from store import backend, errors, sql
from store.backends import core, migrate, pg_writers, writer
from store.backends.lanes import Lane
from store.cluster import notify

if TYPE_CHECKING:
    from psycopg.rows import RowMaker

log = logging.getLogger(__name__)
T = TypeVar("T")

#: The advisory lock key under which one process applies migrations ("gh-migrt").
MIGRATE_LOCK = 0x67682D6D69677274
MIGRATIONS_DIR = sql.POSTGRES_DIR / "migrations"
#: A statement run more often than this on a connection is prepared (psycopg's default).
PREPARE_THRESHOLD = 5
#: Read lanes see each statement's own snapshot, as SQLite's readers do; a read unit
#: that wants one snapshot for several statements opens BEGIN itself.
_READER_SETUP = (
    "SET default_transaction_read_only = on",
    "SET default_transaction_isolation = 'repeatable read'",
)


class Row:
    """A result row: by index, by column name, `dict(row)` and unpacking."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: tuple[Any, ...], index: Mapping[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Row) else other)

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"Row{self._values!r}"

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: Any) -> RowMaker[Row]:
    names = [column.name for column in cursor.description or ()]
    index = {name: i for i, name in enumerate(names)}
    return lambda values: Row(tuple(values), index)


class Cursor:
    """One statement's results, shaped as sqlite3's cursor for the units."""

    def __init__(self, cursor: psycopg.Cursor[Row]) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone() if self._cursor.description else None

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall() if self._cursor.description else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


#: Statements sent by this process's store connections, by label (`_label`).
_sent: Counter[str] = Counter()
_sent_lock = threading.Lock()


def statements_sent() -> int:
    """Statements this process's store connections sent to the server (each a round
    trip; savepoints, COMMITs and NOTIFYs included): what `bench scale` counts."""
    with _sent_lock:
        return sum(_sent.values())


def statements_by_label() -> dict[str, int]:
    """`statements_sent` by statement: a named query as `noun.name`, any other by its
    first words; a read lane's prefixed `read `. What `bench scale --by-statement` lists."""
    with _sent_lock:
        return dict(_sent)


def _label(query: str, reader: bool) -> str:
    if isinstance(query, sql.Query):
        label = f"{query.noun}.{query.name}"
    else:
        label = " ".join(query.split()[:3])
    return f"read {label}" if reader else label


def _count(query: str, reader: bool, n: int = 1) -> None:
    label = _label(query, reader)
    with _sent_lock:
        _sent[label] += n


class Conn:
    """A psycopg connection that runs the store's named SQL (`backend.Conn`).

    A connection the server dropped (a restart, a failover) is opened again before
    the next unit; the unit it failed under is not run again, since its commit may
    have happened.

    Inside a transaction a unit's `notify.send_sync` only notes its channel: each
    channel is notified once, just before COMMIT (the server merges a transaction's
    equal notifications anyway, so one statement per channel wakes the same
    listeners); a savepoint rolled back forgets what its unit noted.
    """

    #: What `backend.chains_writes` asks: PostgreSQL runs data-modifying CTEs.
    dialect: backend.Dialect = "postgres"
    #: The units sharing the transaction now (`backend.shares_transaction`).
    batch_size = 1

    def __init__(self, url: str, *, reader: bool = False, prepared: bool = True) -> None:
        self._url = url
        self._reader = reader
        self._prepare_threshold = PREPARE_THRESHOLD if prepared else None
        self.raw = self._open()
        self._channels: set[str] = set()
        self._savepoints: list[tuple[str, frozenset[str]]] = []

    def _open(self) -> psycopg.Connection[Row]:
        raw = psycopg.connect(
            self._url,
            autocommit=True,
            prepare_threshold=self._prepare_threshold,
            row_factory=_row_factory,
        )
        for setting in _READER_SETUP if self._reader else ():
            raw.execute(setting)
        return raw

    def reopen_if_dropped(self) -> None:
        if self.raw.closed:
            log.warning("the database connection was lost; connecting again")
            self.raw = self._open()

    def execute(self, query: str, parameters: Any = None, /) -> Cursor:
        self._track(query)
        _count(query, self._reader)
        # Always with parameters, so psycopg reads `%%` as `%` whether or not any are used.
        return Cursor(self.raw.execute(sql.postgres(query), parameters or {}))

    def executemany(self, query: str, parameters: Iterable[Any], /) -> Cursor:
        rows = list(parameters)
        _count(query, self._reader, len(rows))
        cursor = self.raw.cursor()
        cursor.executemany(sql.postgres(query), rows)
        return Cursor(cursor)

    def notify_at_commit(self, channel: str) -> bool:
        """Note `channel` to notify at this transaction's COMMIT; False outside one
        (the caller then notifies at once)."""
        if not self.in_transaction:
            return False
        self._channels.add(channel)
        return True

    def _track(self, query: str) -> None:
        """Keep the noted channels in step with the transaction and its savepoints,
        and send them just before COMMIT."""
        word, _, name = query.partition(" ")
        if word == "COMMIT":
            for channel in sorted(self._channels):
                _count(notify.Q["notify"], self._reader)
                self.raw.execute(sql.postgres(notify.Q["notify"]), {"channel": channel})
        if word in ("BEGIN", "COMMIT", "ROLLBACK") and not name.startswith("TO "):
            self._channels.clear()
            self._savepoints.clear()
        elif word == "SAVEPOINT":
            self._savepoints.append((name, frozenset(self._channels)))
        elif word == "ROLLBACK":  # ROLLBACK TO name: what the savepoint's units noted goes
            self._channels = set(dict(self._savepoints).get(name[3:], self._channels))
        elif word == "RELEASE" and self._savepoints:
            self._savepoints.pop()

    def script(self, text: str) -> None:
        """Run several statements at once, as written (a migration)."""
        self.raw.execute(text.encode())

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    def close(self) -> None:
        self.raw.close()


def connect(url: str, *, reader: bool = False, prepared: bool = True) -> Conn:
    return Conn(url, reader=reader, prepared=prepared)


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
