"""The single writer: every write is a unit run inside `BEGIN IMMEDIATE` on one lane.

Callers queue before any transaction opens. Units that arrive while a commit is
in flight share the next transaction (group commit): each runs in its own
SAVEPOINT, so one unit's failure rolls back only its own work, and every caller
is answered after the shared COMMIT, so nobody sees a result that could still be
lost. One caller at a time pays one fsync per unit; 64 callers share them.

Units written while an operator waits (inside `foreground()`: a Telegram update, a CLI
command) run before background work queued earlier, in batches of their own, so a tap
waits for at most the transaction in flight, not for a tick's queue. A background batch
in flight when such a unit arrives commits after the unit it is running, and the rest of
it goes back to the front of the queue: the operator waits for one unit and a commit, not
for up to MAX_BATCH units.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from store import backend, errors
from store.backends.lanes import Lane

log = logging.getLogger(__name__)
T = TypeVar("T")
Unit = Callable[[sqlite3.Connection], Any]
C = TypeVar("C", bound=backend.Conn)

#: Units sharing one commit at most; bounds the latency one slow unit adds to others.
MAX_BATCH = 64

_foreground: contextvars.ContextVar[bool] = contextvars.ContextVar("foreground", default=False)


def in_foreground() -> bool:
    """Whether the caller writes while an operator waits (inside `foreground()`)."""
    return _foreground.get()


@contextlib.contextmanager
def foreground() -> Iterator[None]:
    """Writes made inside this block (and in tasks it starts) go ahead of background work.

    SQLite's single writer runs them before the queued background units; PostgreSQL's
    lanes take them first and keep a lane free for them (store.backends.pg_writers)."""
    token = _foreground.set(True)
    try:
        yield
    finally:
        _foreground.reset(token)


@dataclass(slots=True)
class _Pending:
    unit: Unit
    future: asyncio.Future[Any]
    transactional: bool = True


@dataclass(frozen=True)
class StorageFault:
    """A write the disk refused; `since` is when this run of failures began."""

    kind: Literal["full", "io"]
    detail: str
    since: datetime


class StorageFaults:
    """What the writer knows of the disk under it, kept in memory: a full disk cannot
    record its own state, so alerts and health read it from here.

    A "full" fault lasts until `room` finds ROOM_BYTES free: a small write that fits
    into free pages or a reused WAL proves nothing about room, and would make the state
    flicker while the disk stays full. An "io" fault ends with the next commit.
    """

    def __init__(self) -> None:
        #: How a write last failed; None again once the fault has ended.
        self.current: StorageFault | None = None
        #: The latest fault ever met and how many so far: a watcher compares counts,
        #: so a fault that ended between two looks is still seen.
        self.last: StorageFault | None = None
        self.count = 0

    def failed(self, exc: BaseException) -> None:
        if not isinstance(exc, errors.STORAGE_FAULTS):
            return
        kind: Literal["full", "io"] = "full" if isinstance(exc, errors.StorageFull) else "io"
        if self.current is None or self.current.kind != kind:
            log.error("the store cannot write: %s", exc)
            since = datetime.now(UTC)
        else:
            since = self.current.since
        self.current = self.last = StorageFault(kind, str(exc), since)
        self.count += 1

    def committed(self, *, full_too: bool = False) -> None:
        """A commit went through: an "io" fault is over (and a "full" one, where the
        disk cannot be measured from here: a database server's)."""
        if self.current is not None and (self.current.kind == "io" or full_too):
            self._ended()

    def measured(self, free: int) -> None:
        if self.current is not None and self.current.kind == "full" and free >= ROOM_BYTES:
            self._ended()

    def _ended(self) -> None:
        assert self.current is not None
        log.warning("the store can write again (it failed with: %s)", self.current.detail)
        self.current = None


#: Room the store needs before a "full" fault ends (bytes).
ROOM_BYTES = 1024 * 1024


def room(conn: sqlite3.Connection) -> int:
    """Bytes the store can still grow by: free disk space for the database's directory,
    and what its page limit (PRAGMA max_page_count) leaves. Reads only."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    limit = conn.execute("PRAGMA max_page_count").fetchone()[0]
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    disk = os.statvfs(os.path.dirname(path))
    return int(min(disk.f_bavail * disk.f_frsize, (limit - pages) * page_size))


@contextlib.contextmanager
def savepoint(conn: backend.Conn, name: str = "nested") -> Iterator[None]:
    """A nested transaction inside a unit: rolled back alone if its block raises."""
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


class Writer:
    """Serialises write units onto the writer lane, batching those that wait."""

    def __init__(self, lane: Lane[sqlite3.Connection], faults: StorageFaults) -> None:
        self._lane = lane
        self._queue: deque[_Pending] = deque()
        #: Units an operator waits for; taken before `_queue` (see `foreground`).
        self._urgent: deque[_Pending] = deque()
        self._wakeup = asyncio.Event()
        #: Set while foreground units wait: the background batch in flight commits early.
        #: Set and cleared on the loop's thread; read by the lane's between two units.
        self._operator_waits = threading.Event()
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        self.faults = faults

    def start(self) -> None:
        self._task = asyncio.create_task(self._drain(), name="store-writer")

    async def measure_room(self) -> int:
        """The store's room now (see `room`); ends a "full" fault once there is enough."""
        free: int = await self.submit(room, transactional=False)
        self.faults.measured(free)
        return free

    @property
    def idle(self) -> bool:
        return not self._busy and not self._queue and not self._urgent

    async def submit(self, unit: Unit, *, transactional: bool = True) -> Any:
        if self._task is None or self._task.done():
            raise errors.Closed()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if _foreground.get():
            self._urgent.append(_Pending(unit, future, transactional))
            self._operator_waits.set()
        else:
            self._queue.append(_Pending(unit, future, transactional))
        # The drain task runs after every caller that is ready now has queued too:
        # that one loop turn is what lets concurrent units share a commit.
        self._wakeup.set()
        return await future

    async def stop(self) -> None:
        """Finish what is queued, then stop."""
        if self._task is None:
            return
        task, self._task = self._task, None
        self._queue.append(_Pending(_stop_marker, asyncio.get_running_loop().create_future()))
        self._wakeup.set()
        await task

    async def _drain(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._urgent or self._queue:
                queue = self._urgent or self._queue
                batch = self._next_batch(queue)
                if not self._urgent:
                    self._operator_waits.clear()
                if batch and batch[0].unit is _stop_marker:
                    return
                if batch:
                    self._busy = True
                    try:
                        left = await self._run(batch, early=queue is self._queue)
                    finally:
                        self._busy = False
                    queue.extendleft(reversed(left))  # in their order, ahead of later units

    @staticmethod
    def _next_batch(queue: deque[_Pending]) -> list[_Pending]:
        """Waiting transactional units up to MAX_BATCH, or one non-transactional unit."""
        batch: list[_Pending] = []
        while queue and len(batch) < MAX_BATCH:
            head = queue[0]
            if head.future.cancelled():  # its caller gave up before it started
                queue.popleft()
                continue
            if head.unit is _stop_marker or not head.transactional:
                if not batch:
                    batch.append(queue.popleft())
                break
            batch.append(queue.popleft())
        return batch

    async def _run(self, batch: list[_Pending], *, early: bool) -> list[_Pending]:
        """Run a batch; returns the units it left unrun (with `early`, for an operator).

        Callers are answered from the lane's callback, in the turn the commit's result
        arrives: they queue their next units before this task resumes to take them."""
        finished: asyncio.Future[list[_Pending]] = asyncio.get_running_loop().create_future()

        def done(result: Any, error: BaseException | None) -> None:
            outcomes = result if batch[0].transactional else [(True, result)]
            settle(finished, True, self._answer(batch, outcomes, error))

        try:
            if batch[0].transactional:
                stop = self._operator_waits if early else None
                self._lane.start(done, run_batch, [p.unit for p in batch], stop)
            else:
                self._lane.start(done, batch[0].unit)
        except Exception as exc:  # the lane has stopped: nothing ran
            done(None, exc)
        return await finished

    def _answer(
        self,
        batch: list[_Pending],
        outcomes: list[tuple[bool, Any]],
        error: BaseException | None,
    ) -> list[_Pending]:
        """Answer the batch's callers; returns the units it left unrun."""
        if error is not None:  # the commit failed: nothing in the batch was written
            # (or a unit raised what is not an Exception, which aborts its whole batch:
            # every caller in it is told, and the writer goes on)
            self.faults.failed(error)
            for pending in batch:
                settle(pending.future, False, error)
            return []
        for pending, (ok, value) in zip(batch, outcomes, strict=False):
            if not ok:
                self.faults.failed(value)
            settle(pending.future, ok, value)
        if batch[0].transactional and any(ok for ok, _ in outcomes):
            self.faults.committed()
        return batch[len(outcomes) :]


def _stop_marker(conn: sqlite3.Connection) -> None:  # pragma: no cover - never run
    raise AssertionError("the stop marker is never executed")


def settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def run_batch(
    conn: C,
    units: Sequence[Callable[[C], Any]],
    stop: threading.Event | None = None,
    *,
    begin: str = "BEGIN IMMEDIATE",
) -> list[tuple[bool, Any]]:
    """Run units in one transaction (`begin` opens it); each alone when it fails. Once
    `stop` is set, the batch commits after the unit it is running: the outcomes are
    those of the first units, and the caller runs the rest later.

    The batch first runs without savepoints (units rarely fail, and two statements
    per unit are a tenth of its cost); if any unit raises, everything is rolled
    back and the whole batch runs again with a savepoint around each unit (not cut
    short: failures are rare). Units are database work only, so running one twice
    is safe.
    """
    if len(units) == 1:
        return [_in_transaction(conn, begin, lambda: _run_single(conn, units[0]))]

    def first_pass() -> list[tuple[bool, Any]]:
        outcomes = []
        for unit in units:
            outcomes.append((True, unit(conn)))
            if stop is not None and stop.is_set():
                break
        return outcomes

    try:
        return _in_transaction(conn, begin, first_pass)
    except Exception:
        every = lambda: [_run_in_savepoint(conn, unit) for unit in units]  # noqa: E731
        return _in_transaction(conn, begin, every)


def _in_transaction(conn: C, begin: str, work: Callable[[], T]) -> T:
    conn.execute(begin)
    try:
        result = work()
        if conn.in_transaction:
            conn.execute("COMMIT")
        return result
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _run_single(conn: C, unit: Callable[[C], Any]) -> tuple[bool, Any]:
    try:
        return True, unit(conn)
    except Exception as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return False, _translated(exc)


def _run_in_savepoint(conn: C, unit: Callable[[C], Any]) -> tuple[bool, Any]:
    conn.execute("SAVEPOINT unit")
    try:
        result = unit(conn)
    except Exception as exc:
        if not conn.in_transaction:
            # SQLite aborted the whole transaction (e.g. SQLITE_FULL): the units
            # before this one are gone too, so the batch fails as a whole. (A broken
            # PostgreSQL connection fails the ROLLBACK TO below, the same way.)
            raise _translated(exc) from exc
        conn.execute("ROLLBACK TO unit")
        conn.execute("RELEASE unit")
        return False, _translated(exc)
    conn.execute("RELEASE unit")
    return True, result


def _translated(exc: Exception) -> Exception:
    if isinstance(exc, sqlite3.Error):
        return errors.translate(exc)
    return errors.translate_postgres(exc) or exc
