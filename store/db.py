"""The store: one writer, separate read connections, pragmas asserted, idle checkpoints.

Use:

    store = await db.Store.open(db.StoreConfig(data_dir=Path("data")))
    new = await seen.mark_seen(store, "news", "feed", ["a", "b"], now)
    await store.close()

Writes are units (`fn(conn) -> T`) run by `store.write(fn)` inside BEGIN IMMEDIATE
on the writer's thread; reads run by `store.read(fn)` on `query_only` connections
of their own, so they never queue behind writes. `Store.open(..., readonly=True)`
opens only read connections and takes no lock: the CLI reads while the bot runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from store import datadir, errors, migrate
from store.lanes import Lane
from store.writer import Writer

log = logging.getLogger(__name__)
T = TypeVar("T")

#: SQLite's busy wait before SQLITE_BUSY; long enough for real contention to clear.
BUSY_TIMEOUT_MS = 5000

#: What the write unit now running asked to do once it commits (see on_commit).
_after_commit: contextvars.ContextVar[dict[object, Callable[[Store], None]]] = (
    contextvars.ContextVar("after_commit")
)


def on_commit(key: object, fn: Callable[[Store], None]) -> None:
    """Inside a write unit: call `fn(store)` on the event loop once the unit has committed.

    Nothing happens if the unit rolls back. Callbacks with the same key run once.
    Outside a unit (a bare connection in a script) there is no commit to wait for.
    """
    pending = _after_commit.get(None)
    if pending is not None:
        pending[key] = fn


@dataclass(frozen=True)
class StoreConfig:
    data_dir: Path
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    #: Read connections; two let a slow report run beside the bot's own reads.
    readers: int = 2
    #: How often the idle checkpointer looks at the WAL.
    checkpoint_every_s: float = 2.0
    #: Past this size an idle checkpoint also truncates the WAL file.
    wal_truncate_bytes: int = 64 * 1024 * 1024

    @property
    def db_path(self) -> Path:
        return self.data_dir / datadir.DB_NAME


def required_pragmas(config: StoreConfig) -> dict[str, object]:
    return {
        "journal_mode": "wal",
        "synchronous": {"FULL": 2, "NORMAL": 1}[config.synchronous],
        "foreign_keys": 1,
        "busy_timeout": BUSY_TIMEOUT_MS,
        "wal_autocheckpoint": 0,
    }


def check_pragmas(conn: sqlite3.Connection, required: dict[str, object]) -> None:
    """Read every pragma back; any difference stops startup, naming each one."""
    wrong = []
    for name, expected in required.items():
        actual = conn.execute(f"PRAGMA {name}").fetchone()[0]
        if isinstance(actual, str):
            actual = actual.lower()
        if actual != expected:
            wrong.append(f"{name} is {actual!r}, expected {expected!r}")
    if wrong:
        raise errors.PragmaMismatch(
            "database pragmas differ from what gatehouse requires: " + "; ".join(wrong)
        )


def _connect_writer(config: StoreConfig) -> sqlite3.Connection:
    with datadir.private_files():
        conn = sqlite3.connect(config.db_path, isolation_level=None, check_same_thread=True)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode=WAL")  # creates the database, WAL and shm files
    conn.execute(f"PRAGMA synchronous={config.synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    check_pragmas(conn, required_pragmas(config))
    return conn


def _connect_reader(config: StoreConfig) -> sqlite3.Connection:
    conn = sqlite3.connect(config.db_path, isolation_level=None, check_same_thread=True)
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA query_only=ON")
    conn.execute("PRAGMA foreign_keys=ON")
    check_pragmas(conn, {"query_only": 1, "journal_mode": "wal"})
    return conn


class Store:
    """The open store. Create with `await Store.open(config)`; close with `await close()`."""

    def __init__(self, config: StoreConfig, readonly: bool) -> None:
        self.config = config
        self.readonly = readonly
        self._lock = datadir.WriterLock(config.data_dir)
        self._writer_lane = Lane("store-writer")
        self._writer = Writer(self._writer_lane)
        #: Storage faults the writer met (disk full, I/O errors), kept in memory.
        self.faults = self._writer.faults
        self._readers = [Lane(f"store-reader-{i}") for i in range(config.readers)]
        self._next_reader = itertools.cycle(self._readers)
        self._checkpointer: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, config: StoreConfig, *, readonly: bool = False) -> Store:
        store = cls(config, readonly)
        try:
            await store._open()
        except BaseException:
            await store.close()
            raise
        return store

    async def _open(self) -> None:
        datadir.prepare(self.config.data_dir)
        if self.readonly:
            if not self.config.db_path.exists():
                raise errors.StoreError(
                    f"no database at {self.config.db_path}; run gatehouse once to create it"
                )
        else:
            self._lock.acquire()
            await self._writer_lane.open(lambda: _connect_writer(self.config))
            await self._writer_lane.run(migrate.apply_pending)
            self._writer.start()
            self._checkpointer = asyncio.create_task(
                self._checkpoint_when_idle(), name="store-checkpoint"
            )
        for reader in self._readers:
            await reader.open(lambda: _connect_reader(self.config))

    async def write(self, unit: Callable[[sqlite3.Connection], T]) -> T:
        """Run `unit(conn)` inside one BEGIN IMMEDIATE transaction on the writer."""
        if self.readonly:
            raise errors.StoreError(
                "this store was opened read-only; writes go through the running bot"
            )
        after: dict[object, Callable[[Store], None]] = {}

        def run(conn: sqlite3.Connection) -> T:
            after.clear()  # a unit may run twice when its group commit is retried
            token = _after_commit.set(after)
            try:
                return unit(conn)
            finally:
                _after_commit.reset(token)

        result: T = await self._writer.submit(run)
        for fn in after.values():
            fn(self)
        return result

    async def measure_room(self) -> int:
        """Bytes the store can still grow by; ends a "storage full" fault once there is room."""
        return await self._writer.measure_room()

    async def read(self, query: Callable[[sqlite3.Connection], T]) -> T:
        """Run `query(conn)` on a query_only connection."""
        return await next(self._next_reader).run(query)

    def wal_bytes(self) -> int:
        """The WAL file's size now (a stat, never an open: see datadir)."""
        try:
            return self.config.data_dir.joinpath(datadir.DB_NAME + "-wal").stat().st_size
        except FileNotFoundError:
            return 0

    async def checkpoint(
        self, mode: Literal["PASSIVE", "TRUNCATE"] = "PASSIVE"
    ) -> tuple[int, int, int]:
        """Checkpoint through the writer's queue, so it never runs inside a write."""

        def run(conn: sqlite3.Connection) -> tuple[int, int, int]:
            row = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
            return (int(row[0]), int(row[1]), int(row[2]))

        result: tuple[int, int, int] = await self._writer.submit(run, transactional=False)
        return result

    async def _checkpoint_when_idle(self) -> None:
        # Automatic checkpoints would run inside whichever commit trips them
        # (tens of ms of p99 at 10M rows); this one waits for an idle writer.
        while True:
            await asyncio.sleep(self.config.checkpoint_every_s)
            if not self._writer.idle or self.wal_bytes() == 0:
                continue
            mode: Literal["PASSIVE", "TRUNCATE"] = (
                "TRUNCATE" if self.wal_bytes() > self.config.wal_truncate_bytes else "PASSIVE"
            )
            try:
                await self.checkpoint(mode)
            except errors.StoreError as exc:
                log.warning("idle checkpoint failed: %s", exc)

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
            self._checkpointer = None
        await self._writer.stop()
        for reader in self._readers:
            await reader.close()
        await self._writer_lane.close()
        self._lock.release()
