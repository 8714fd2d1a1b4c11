"""Storage alarms: a full or failing disk told to the operators straight through the bot.

    RuntimeConfig(..., workers=(storage_alarm.make_worker(send),))   # send(text) -> None

Every other alert is an outbox row, but a store that cannot write cannot queue one. This
path needs no write: it watches the writer's in-memory record of storage faults
(`store.faults`), sends one message per kind of fault at most once an hour, and one
when writes succeed again. While a fault lasts it measures the store's free room
(store.backends.writer.room), so recovery is noticed even when nothing else writes. What it
has sent is kept in memory only; a restart may repeat an alert, the safe way round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from pipelines.service import seams
from store import errors, units
from store.backends import writer

log = logging.getLogger(__name__)

#: How often the watcher looks at the writer's faults (seconds); an alert goes out
#: within this, well inside a minute.
CHECK_EVERY_S = 5.0
#: The same kind of fault is told again at most this often (seconds).
REPEAT_S = 3600.0
#: The words an operator sees for each kind of fault (also in status and health).
KIND_WORDS = {"full": "storage full", "io": "storage I/O error"}

Send = Callable[[str], Awaitable[None]]


def describe(fault: writer.StorageFault) -> str:
    """One line for status and health: what failed, since when, and SQLite's own words."""
    return f"{KIND_WORDS[fault.kind]} since {units.when_exact(fault.since)}: {fault.detail}"


def alert_text(fault: writer.StorageFault) -> str:
    return (
        f"🚨 {describe(fault)}\n"
        "gatehouse cannot write its database: nothing committed is lost, but new work, "
        "decisions and cards wait. Free space on the data directory's disk; "
        "gatehouse goes on by itself once writes succeed."
    )


RECOVERED_TEXT = "✅ storage writes succeed again; gatehouse goes on with the work that waited."


class Alarm:
    """Decides what to tell, given the writer's faults; `clock` is monotonic seconds."""

    def __init__(self, faults: writer.StorageFaults, clock: Callable[[], float]) -> None:
        self._faults = faults
        self._clock = clock
        self._seen = faults.count
        self._told: dict[str, float] = {}  # kind -> when it was last told
        self._unresolved = False  # an alert went out and no recovery message since

    def due(self) -> str | None:
        """The message to send now, if any; call `sent` once it went out."""
        faults = self._faults
        # A fault that came and went between two looks is told as well.
        fault = faults.current or (faults.last if faults.count != self._seen else None)
        if fault is not None:
            told = self._told.get(fault.kind)
            if told is None or self._clock() - told >= REPEAT_S:
                return alert_text(fault)
            self._seen = faults.count  # told within the hour: this one is a repeat
        if faults.current is None and self._unresolved:
            return RECOVERED_TEXT
        return None

    def sent(self, text: str) -> None:
        self._seen = self._faults.count
        if text == RECOVERED_TEXT:
            self._unresolved = False
            return
        fault = self._faults.current or self._faults.last
        assert fault is not None
        self._told[fault.kind] = self._clock()
        self._unresolved = True


def make_worker(send: Send) -> Callable[[seams.Stored, asyncio.Event], Awaitable[None]]:
    """The runtime worker that watches `runtime.store.faults` and sends with `send`."""

    async def storage_alarm(runtime: seams.Stored, stop: asyncio.Event) -> None:
        store = runtime.store
        alarm = Alarm(store.faults, time.monotonic)
        while not stop.is_set():
            if store.faults.current is not None:
                # Looks at free room without writing, so recovery is seen even when
                # nothing else writes.
                with contextlib.suppress(errors.StoreError, OSError):
                    await store.measure_room()
            text = alarm.due()
            if text is not None:
                try:
                    await send(text)
                except Exception as exc:  # any failure: the next look tries again
                    log.warning("could not send the storage alert, trying again: %s", exc)
                else:
                    alarm.sent(text)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHECK_EVERY_S)

    return storage_alarm
