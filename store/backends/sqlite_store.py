"""The SQLite store: one writer, separate read connections, pragmas asserted, a bounded WAL.

`db.open(config)` returns this store when the config names no database URL.
Writes are units (`fn(conn) -> T`) run by `store.write(fn)` inside BEGIN IMMEDIATE
on the writer's thread; reads run by `store.read(fn)` on `query_only` connections
of their own, so they never queue behind writes. `db.open(..., readonly=True)`
opens only read connections and takes no lock: the CLI reads while the bot runs.

The WAL is kept under `wal_max_bytes` by a checkpointer on a connection of its own
(automatic checkpoints are off: they would run inside whichever commit trips them).
Every `checkpoint_every_s` after new commits it runs a PASSIVE checkpoint, which
never blocks the writer. Under steady load the writer never leaves the WAL fully
copied, so SQLite cannot start the file over and it would grow without end: once
the WAL holds a quarter of its bound, a RESTART runs from the writer's queue, between
two of its transactions: it copies the last few frames (the PASSIVE runs copied the
rest) and waits, briefly, for readers of older snapshots; the next write then starts
the file over, and `journal_size_limit` trims it back to the bound. RESTART and
TRUNCATE run only there, and give up after CHECKPOINT_BUSY_MS of readers. A checkpoint
that keeps failing (a full disk fails every pass) is one episode in the log
(store.episodes): its first failure, a line a minute, and its recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

from store import backend, episodes, errors
from store.backends import core, datadir, migrate
from store.backends.core import CheckpointMode, StoreConfig
from store.backends.lanes import Lane
from store.backends.writer import Writer

log = logging.getLogger(__name__)
T = TypeVar("T")

#: SQLite's busy wait before SQLITE_BUSY; long enough for real contention to clear.
BUSY_TIMEOUT_MS = 5000
#: How long a RESTART or TRUNCATE waits for readers; the writer is held meanwhile.
CHECKPOINT_BUSY_MS = 10
#: Bytes a WAL frame adds to a page (its header).
FRAME_HEADER = 24


class Row(sqlite3.Row):
    """A result row readable by column name that also equals the tuple of its values.

    Every connection units run on hands these back, as `pg_conn.Row` does on PostgreSQL,
    so a unit reads `row["state"]` on either backend without asking for it.
    """

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, sqlite3.Row) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Row{tuple(self)!r}"


def required_pragmas(config: StoreConfig) -> dict[str, object]:
    return {
        "journal_mode": "wal",
        "synchronous": {"FULL": 2, "NORMAL": 1}[config.synchronous],
        "foreign_keys": 1,
        "busy_timeout": BUSY_TIMEOUT_MS,
        "wal_autocheckpoint": 0,
        "journal_size_limit": config.wal_max_bytes,
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
        conn.row_factory = Row
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode=WAL")  # creates the database, WAL and shm files
    conn.execute(f"PRAGMA synchronous={config.synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute(f"PRAGMA journal_size_limit={int(config.wal_max_bytes)}")
    check_pragmas(conn, required_pragmas(config))
    return conn


def _connect_checkpointer(config: StoreConfig) -> sqlite3.Connection:
    # Used from two threads, never at once: its own lane's (PASSIVE) and the writer's
    # (RESTART, TRUNCATE), serialised by Store._checkpoint_lock.
    conn = sqlite3.connect(config.db_path, isolation_level=None, check_same_thread=False)
    # A TRUNCATE waits this long for readers, while the writer is held: keep it short.
    conn.execute(f"PRAGMA busy_timeout={CHECKPOINT_BUSY_MS}")
    # A checkpoint syncs the database file as this connection's setting says.
    conn.execute(f"PRAGMA synchronous={config.synchronous}")
    conn.execute(f"PRAGMA journal_size_limit={int(config.wal_max_bytes)}")
    required = required_pragmas(config)
    check_pragmas(
        conn,
        {
            "journal_mode": "wal",
            "busy_timeout": CHECKPOINT_BUSY_MS,
            "synchronous": required["synchronous"],
            "journal_size_limit": config.wal_max_bytes,
        },
    )
    return conn


def _connect_reader(config: StoreConfig) -> sqlite3.Connection:
    conn = sqlite3.connect(config.db_path, isolation_level=None, check_same_thread=True)
    conn.row_factory = Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA query_only=ON")
    conn.execute("PRAGMA foreign_keys=ON")
    check_pragmas(conn, {"query_only": 1, "journal_mode": "wal"})
    return conn


def _checkpoint(conn: sqlite3.Connection, mode: CheckpointMode) -> tuple[int, int, int]:
    row = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
    return (int(row[0]), int(row[1]), int(row[2]))


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])


class SqliteStore(core.Store):
    """The store in one SQLite file in the data directory."""

    dialect = "sqlite"

    def __init__(self, config: StoreConfig, readonly: bool) -> None:
        super().__init__(config, readonly)
        self._lock = datadir.WriterLock(config.data_dir)
        self._writer_lane: Lane[sqlite3.Connection] = Lane("store-writer")
        self._writer = Writer(self._writer_lane, self.faults)
        self._readers: list[Lane[sqlite3.Connection]] = [
            Lane(f"store-reader-{i}") for i in range(config.readers)
        ]
        self._next_reader = itertools.cycle(self._readers)
        self._checkpointer_lane: Lane[sqlite3.Connection] = Lane("store-checkpointer")
        self._checkpoint_conn: sqlite3.Connection | None = None
        self._checkpoint_lock = asyncio.Lock()
        self._checkpointer: asyncio.Task[None] | None = None
        self._page_size = 4096

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
            conn = await asyncio.to_thread(_connect_checkpointer, self.config)
            self._checkpoint_conn = conn
            await self._checkpointer_lane.open(lambda: conn)
            self._page_size = await self._checkpointer_lane.run(
                lambda conn: int(conn.execute("PRAGMA page_size").fetchone()[0])
            )
            self._checkpointer = asyncio.create_task(
                self._checkpoint_by_size(), name="store-checkpoint"
            )
        for reader in self._readers:
            await reader.open(lambda: _connect_reader(self.config))

    async def _write(self, unit: Callable[[backend.Conn], T]) -> T:
        """Run `unit(conn)` inside one BEGIN IMMEDIATE transaction on the writer."""
        result: T = await self._writer.submit(unit)
        return result

    async def measure_room(self) -> int:
        """Bytes the store can still grow by; ends a "storage full" fault once there is room."""
        return await self._writer.measure_room()

    async def _read(self, query: Callable[[backend.Conn], T]) -> T:
        """Run `query(conn)` on a query_only connection."""
        return await next(self._next_reader).run(query)

    def wal_bytes(self) -> int:
        """The WAL file's size now (a stat, never an open: see datadir)."""
        try:
            return self.config.data_dir.joinpath(datadir.DB_NAME + "-wal").stat().st_size
        except FileNotFoundError:
            return 0

    async def checkpoint(self, mode: CheckpointMode = "PASSIVE") -> tuple[int, int, int]:
        """(busy, frames in the WAL, frames copied), on the checkpointer's connection.

        A PASSIVE runs on the checkpointer's own thread beside the writer. A RESTART or
        TRUNCATE runs from the writer's queue, between two of its transactions, so the
        writer is held for exactly the checkpoint's own time and no longer.
        """
        async with self._checkpoint_lock:
            if mode == "PASSIVE":
                self.checkpoint_stats.passive += 1
                return await self._checkpointer_lane.run(_checkpoint, mode)
            return await self._held_checkpoint(mode)

    async def _held_checkpoint(self, mode: CheckpointMode) -> tuple[int, int, int]:
        conn = self._checkpoint_conn
        assert conn is not None, "the checkpointer opens with the writer"

        def held(_writer: sqlite3.Connection) -> tuple[tuple[int, int, int], float]:
            # The writer's thread, between transactions, on the checkpointer's
            # connection; the lock in `checkpoint` keeps its own thread off it meanwhile.
            started = time.perf_counter()
            result = _checkpoint(conn, mode)
            return result, time.perf_counter() - started

        result, seconds = await self._writer.submit(held, transactional=False)
        stats = self.checkpoint_stats
        stats.held += 1
        stats.longest_hold_s = max(stats.longest_hold_s, seconds)
        return result  # type: ignore[no-any-return]

    async def _checkpoint_by_size(self) -> None:
        copied_version = None  # data_version when the WAL was last fully copied
        # A full disk fails every pass: one line when it begins, one a minute, one at the end.
        failures = episodes.Episode(log, "checkpoint failed", "checkpoints work again")
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.checkpoint_every_s)
            size = self.wal_bytes()
            stats = self.checkpoint_stats
            stats.peak_wal_bytes = max(stats.peak_wal_bytes, size)
            try:
                # Changes when another connection (the writer) commits: anything new?
                async with self._checkpoint_lock:
                    version = await self._checkpointer_lane.run(_data_version)
                if version == copied_version:
                    continue
                if await self._checkpoint_step(size):
                    copied_version = version
            except errors.StoreError as exc:
                failures.failed(exc, loop.time())
            else:
                failures.worked()

    async def _checkpoint_step(self, size: int) -> bool:
        """One look at the WAL; True when every frame was copied into the database."""
        idle = self._writer.idle
        busy, frames, copied = await self.checkpoint("PASSIVE")
        if idle:
            if size > self.config.wal_max_bytes:  # one huge transaction outgrew the bound
                busy, frames, copied = await self.checkpoint("TRUNCATE")
        elif frames * (self._page_size + FRAME_HEADER) >= self.config.wal_max_bytes // 4:
            # The writer never leaves the WAL fully copied under steady load: between two
            # of its transactions, copy the last frames and wait (briefly) for readers,
            # so that its next write starts the file over. One more PASSIVE first copies
            # what was committed during the last one, beside the writer: the held one
            # then has only the frames of a few milliseconds left to copy.
            await self.checkpoint("PASSIVE")
            busy, frames, copied = await self.checkpoint("RESTART")
        return not busy and frames == copied

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checkpointer
            self._checkpointer = None
        await self._writer.stop()
        await self._checkpointer_lane.close()
        for reader in self._readers:
            await reader.close()
        await self._writer_lane.close()
        self._lock.release()
