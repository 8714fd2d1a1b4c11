"""PostgreSQL's write lanes: units queue, and a free lane takes those waiting as one batch.

Several lanes write side by side, here and in other processes. A unit that finds a lane
free runs at once, alone. Under load (a tick's drafts, a run of approvals) the units
waiting for a lane share its next transaction, each in a savepoint, exactly as on
SQLite's single writer (`writer.run_batch`): a tick commits in batches, not once per
item. The waiting units are spread over the free lanes, so the server's cores work on
several batches at once.

Units written while an operator waits (`writer.foreground`) are taken first, and
background work leaves one lane free for them: a tap never queues behind a tick's
batches, and waits for nobody's commit but its own.

A unit that loses a deadlock or a serialization check (alone, or with its batch at
COMMIT) runs again, ATTEMPTS times in all; units are database work only, so a second
run is safe. A unit that must take a lock other processes queue on (a budget row's, to
grant its slot room) raises RunAlone when it shares a batch: it runs again in a
transaction of its own, holding that lock for its few statements rather than for a
whole batch. Callers are answered after their batch's COMMIT, in the loop turn its
result arrives.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from store import backend, errors
from store.backends import writer
from store.backends.lanes import Lane

log = logging.getLogger(__name__)

#: Units sharing one transaction at most. Smaller than SQLite's: a batch holds the row
#: locks of all its units until it commits, and other processes may wait for them.
MAX_BATCH = 16
#: Times a unit runs when it keeps losing deadlocks or serialization checks.
ATTEMPTS = 5

Unit = Callable[[backend.Conn], Any]
BatchRunner = Callable[[Any, list[Unit]], list[tuple[bool, Any]]]


@dataclass(slots=True)
class _Pending:
    unit: Unit
    future: asyncio.Future[Any]
    urgent: bool
    attempt: int = 1
    #: Runs in a transaction of its own (it raised RunAlone in a batch).
    alone: bool = False


class Writers:
    """The write lanes of one process and the units waiting for them."""

    def __init__(
        self, lanes: list[Lane[Any]], faults: writer.StorageFaults, run_batch: BatchRunner
    ) -> None:
        self._lanes = lanes
        self._free = list(lanes)
        self._run_batch = run_batch
        self._urgent: deque[_Pending] = deque()
        self._queue: deque[_Pending] = deque()
        self._faults = faults
        self._scheduled = False
        self._closed = False

    async def submit(self, unit: Unit) -> Any:
        if self._closed or not self._lanes:
            raise errors.Closed()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        urgent = writer.in_foreground()
        (self._urgent if urgent else self._queue).append(_Pending(unit, future, urgent))
        # Dispatched after every caller ready in this loop turn has queued too: units
        # that arrive together are spread over the free lanes together.
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch)
        return await future

    def close(self) -> None:
        """Refuse new units and fail those not started; batches on a lane finish there."""
        self._closed = True
        for pending in [*self._urgent, *self._queue]:
            writer.settle(pending.future, False, errors.Closed())
        self._urgent.clear()
        self._queue.clear()

    def _dispatch(self) -> None:
        self._scheduled = False
        while self._free and not self._closed:
            urgent = bool(self._urgent)
            queue = self._urgent if urgent else self._queue
            kept = 0 if urgent or len(self._lanes) == 1 else 1  # a lane for an operator
            lanes = len(self._free) - kept
            if not queue or lanes <= 0:
                return
            batch = _take(queue, min(MAX_BATCH, -(-len(queue) // lanes)))
            if batch:
                self._start(self._free.pop(), batch)

    def _start(self, lane: Lane[Any], batch: list[_Pending]) -> None:
        def done(outcomes: Any, error: BaseException | None) -> None:
            if not self._closed:
                self._free.append(lane)
            self._answer(batch, outcomes, error)
            self._dispatch()

        try:
            lane.start(done, self._run_batch, [p.unit for p in batch])
        except Exception as exc:  # the lane has stopped (the store is closing): nothing ran
            self.close()
            done(None, exc)

    def _answer(self, batch: list[_Pending], outcomes: Any, error: BaseException | None) -> None:
        if error is not None:  # the commit failed: nothing in the batch was written
            outcomes = [(False, error)] * len(batch)
        again: list[_Pending] = []
        for pending, (ok, value) in zip(batch, outcomes, strict=True):
            if ok:
                writer.settle(pending.future, True, value)
                continue
            if isinstance(value, errors.RunAlone):  # never its caller's to hear
                if self._closed:
                    writer.settle(pending.future, False, errors.Closed())
                else:
                    pending.alone = True
                    again.append(pending)
                continue
            self._faults.failed(value)
            if _retryable(value) and pending.attempt < ATTEMPTS and not self._closed:
                log.info("a write lost a %s; running it again", value.sqlstate)
                pending.attempt += 1
                again.append(pending)
            else:
                writer.settle(pending.future, False, value)
        if any(ok for ok, _ in outcomes):
            self._faults.committed(full_too=True)
        for pending in reversed(again):  # in their order, ahead of later units
            (self._urgent if pending.urgent else self._queue).appendleft(pending)


def _take(queue: deque[_Pending], size: int) -> list[_Pending]:
    """Up to `size` waiting units, skipping those whose caller gave up before they ran;
    a unit that must run alone is a batch of its own."""
    batch: list[_Pending] = []
    while queue and len(batch) < size and not (batch and queue[0].alone):
        pending = queue.popleft()
        if not pending.future.cancelled():
            batch.append(pending)
            if pending.alone:
                break
    return batch


def _retryable(exc: BaseException) -> bool:
    # serialization_failure, deadlock_detected
    return isinstance(exc, errors.StoreError) and exc.sqlstate in ("40001", "40P01")
