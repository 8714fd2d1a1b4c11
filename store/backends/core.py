"""The store's shape, shared by both backends: its config and the `Store` base class.

Writes are units (`fn(conn) -> T`) run by `store.write(fn)` inside one transaction;
reads run by `store.read(fn)` on connections of their own. Each backend
(`store.backends.sqlite_store`, `store.backends.pg`) subclasses `Store`; `store.db` opens
the one the config asks for, and is what the rest of the code imports.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import ClassVar, Concatenate, Literal, ParamSpec, TypeVar

from store import backend, errors
from store.backends import datadir, notify, writer

T = TypeVar("T")
P = ParamSpec("P")
CheckpointMode = Literal["PASSIVE", "RESTART", "TRUNCATE"]


@dataclass
class CheckpointStats:
    """What the checkpointer did since the store opened (benchmarks and tests read it)."""

    passive: int = 0
    #: Checkpoints run with the writer held (RESTART or TRUNCATE).
    held: int = 0
    longest_hold_s: float = 0.0
    peak_wal_bytes: int = 0


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
    #: How often the checkpointer looks at the WAL (a stat and PRAGMA data_version; it
    #: checkpoints only after new commits).
    checkpoint_every_s: float = 0.02
    #: The WAL file's bound; a held-writer checkpoint starts it over at a quarter of this.
    wal_max_bytes: int = 64 * 1024 * 1024
    #: Sent messages and stored LLM outputs older than this are pruned (store.upkeep.retention).
    retention: timedelta = timedelta(days=30)
    #: `postgresql://...`: the store lives there instead of in the data directory. It may
    #: hold a password, so it is never printed (repr=False) nor put into an error.
    database_url: str | None = field(default=None, repr=False)
    #: PostgreSQL only: write lanes, each a connection running one batch at a time.
    writers: int = 4
    #: PostgreSQL only: let the server keep the plans of repeated statements (the driver
    #: prepares a statement after a few runs). Off behind a pooler in transaction mode
    #: that does not track prepared statements (PgBouncer before 1.21, or without
    #: max_prepared_statements).
    prepared_statements: bool = True

    @property
    def db_path(self) -> Path:
        return self.data_dir / datadir.DB_NAME


class Store:
    """The open store. Create with `await db.open(config)`; close with `await close()`."""

    dialect: ClassVar[backend.Dialect]
    #: Whether other processes may write this store at the same time (PostgreSQL's
    #: workers); False where one process alone opens it (SQLite's writer lock).
    shared: ClassVar[bool] = False

    def __init__(self, config: StoreConfig, readonly: bool) -> None:
        self.config = config
        self.readonly = readonly
        #: Storage faults writes met (disk full, I/O errors), kept in memory.
        self.faults = writer.StorageFaults()
        self.checkpoint_stats = CheckpointStats()
        #: Called with each committed write's seconds, queueing included (metrics).
        self.write_observer: Callable[[float], None] | None = None

    @classmethod
    async def open_backend(cls, config: StoreConfig, *, readonly: bool = False) -> Store:
        """This backend's store, open, migrated (unless read-only); `db.open` picks one."""
        store = cls(config, readonly)
        try:
            await store._open()
        except BaseException:
            await store.close()
            raise
        return store

    async def _open(self) -> None:
        raise NotImplementedError

    async def write(
        self, unit: Callable[Concatenate[backend.Conn, P], T], *args: P.args, **kw: P.kwargs
    ) -> T:
        """Run `unit(conn, *args, **kw)` in one write transaction; callbacks run after its commit.

        `await store.write(items.transition_sync, item_id, State.DRAFTING, "system", now)`
        """
        return await self._written(self._write, unit, *args, **kw)

    async def write_now(
        self, unit: Callable[Concatenate[backend.Conn, P], T], *args: P.args, **kw: P.kwargs
    ) -> T:
        """As `write`, for a small write that must never wait behind this process's own
        work (the leader's lease, the heartbeat that keeps its runs): it goes ahead of
        every queued unit, and on PostgreSQL runs on a connection of its own, so lanes
        held by long units or a tick's backlog cannot starve it."""
        with writer.foreground():
            return await self._written(self._write_now, unit, *args, **kw)

    async def _written(
        self,
        via: Callable[[Callable[[backend.Conn], T]], Awaitable[T]],
        unit: Callable[Concatenate[backend.Conn, P], T],
        *args: P.args,
        **kw: P.kwargs,
    ) -> T:
        if self.readonly:
            raise errors.StoreError(
                "this store was opened read-only; writes go through the running bot"
            )
        after: dict[object, Callable[[Store], None]] = {}

        def run(conn: backend.Conn) -> T:
            after.clear()  # a unit may run twice when its transaction is retried
            token = _after_commit.set(after)
            try:
                return unit(conn, *args, **kw)
            finally:
                _after_commit.reset(token)

        started = time.perf_counter()
        result = await via(run)
        if self.write_observer is not None:
            self.write_observer(time.perf_counter() - started)
        for fn in after.values():
            fn(self)
        return result

    async def _write(self, unit: Callable[[backend.Conn], T]) -> T:
        raise NotImplementedError

    async def _write_now(self, unit: Callable[[backend.Conn], T]) -> T:
        """One writer (SQLite): ahead of the queue is the best there is."""
        return await self._write(unit)

    async def read(
        self, query: Callable[Concatenate[backend.Conn, P], T], *args: P.args, **kw: P.kwargs
    ) -> T:
        """Run `query(conn, *args, **kw)` on a read-only connection."""
        return await self._read(lambda conn: query(conn, *args, **kw))

    async def _read(self, query: Callable[[backend.Conn], T]) -> T:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def measure_room(self) -> int:
        """Bytes the store can still grow by; ends a "storage full" fault once there is room."""
        raise NotImplementedError

    @property
    def location(self) -> str:
        """Where the store lives, for operators (never with a password)."""
        return str(self.config.db_path)

    def listen(self, channel: str, event: asyncio.Event | None = None) -> asyncio.Event:
        """An event (`event`, else a new one) set when another process sharing the store
        commits a notification on `channel` (`notify.send_sync`); one event may listen on
        several channels. SQLite has no other process: nothing sets it, and this
        process's own commits wake it through `on_commit`."""
        notify.check_channel(channel)
        return event or asyncio.Event()

    def wal_bytes(self) -> int:
        """The write-ahead log's size on this machine (0 where the server keeps it)."""
        return 0

    async def checkpoint(self, mode: CheckpointMode = "PASSIVE") -> tuple[int, int, int]:
        """(busy, frames in the WAL, frames copied); (0, 0, 0) where the server checkpoints."""
        return (0, 0, 0)


def writes(
    unit: Callable[Concatenate[backend.Conn, P], T],
) -> Callable[Concatenate[Store, P], Awaitable[T]]:
    """The async twin of a write unit that does nothing else: `start_run =
    writes(start_run_sync)` is `await store.write(start_run_sync, ...)` under the unit's
    own signature, which a hand-written twin would only repeat."""

    async def twin(store: Store, /, *args: P.args, **kw: P.kwargs) -> T:
        return await store.write(unit, *args, **kw)

    twin.__name__ = twin.__qualname__ = unit.__name__.removesuffix("_sync")
    twin.__doc__ = unit.__doc__
    return twin
