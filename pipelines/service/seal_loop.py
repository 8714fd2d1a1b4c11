"""The leader's sealer: seals the audit chain's unsealed events every `SEAL_EVERY_S`,
and tells the operators when an event waits longer than the promised seal delay.

    runtime.lead("sealer", functools.partial(sealing.run, store, clock, every_s, max_delay))

A pass that seals a full batch starts the next at once, so a backlog (a leader that
took over late) drains at the store's pace; otherwise passes come every `every_s`.
When the leader stands down its lease is still held: one last pass seals what its
own process wrote, so a clean stop leaves nothing pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TypeVar

from pipelines.ground import waiting
from store import backend, episodes, errors, outbox, payloads
from store.audit import sealer
from store.db import Store

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Seconds between sealing passes: the chain's head trails the writes by about this.
SEAL_EVERY_S = 0.1
#: The promised maximum seal delay (seconds): an event unsealed longer raises an alert.
MAX_SEAL_DELAY_S = 1.0
#: Seconds between checks of the oldest unsealed event's age.
CHECK_EVERY_S = 1.0


def alert_if_late_sync(
    conn: backend.Conn, watch: sealer.Watch, now: datetime, max_delay: timedelta
) -> float:
    """Queue one alert per hour while an event waits past `max_delay`; its age (s)."""
    age, waiting = watch.age_sync(conn, now)
    if age > max_delay.total_seconds():
        text = (
            f"⚠️ audit events wait to be sealed: {waiting} unsealed, the oldest for "
            f"{age:.1f} s (the promise is {max_delay.total_seconds():g} s). Is the "
            "leader's sealer running? `gatehouse audit verify` lists them as pending."
        )
        outbox.alert_sync(
            conn,
            payloads.Alert(text=text, level="warning"),
            now,
            key=f"seal-delay:{now:%Y-%m-%dT%H}",
        )
    return age


async def run(
    store: Store,
    clock: Callable[[], datetime],
    every_s: float,
    max_delay: timedelta,
    stop: asyncio.Event,
) -> None:
    """Seal until `stop` is set, then once more."""
    checked = float("-inf")
    watch = sealer.Watch()
    loop = asyncio.get_running_loop()
    # A full disk fails a pass every `every_s`: one line when it begins, one a minute.
    failures = episodes.Episode(log, "sealing pass failed", "sealing passes work again")
    late_failures = episodes.Episode(log, "seal delay check failed", "seal delay checks work")
    while not stop.is_set():
        sealed = await _quietly(sealer.seal(store), 0, failures, clock)
        if loop.time() - checked >= CHECK_EVERY_S:
            checked = loop.time()
            late = store.write(alert_if_late_sync, watch, clock(), max_delay)
            await _quietly(late, 0.0, late_failures, clock)
        if sealed < sealer.BATCH:
            await waiting.wait_any((stop,), every_s)
    with contextlib.suppress(errors.Closed):
        await _quietly(sealer.seal(store), 0, failures, clock)


async def _quietly(
    work: Awaitable[T], failed: T, failures: episodes.Episode, clock: Callable[[], datetime]
) -> T:
    """`work`'s result, or `failed` when the store refused it: a deposed leader's batch
    that lost to the new leader's, a connection that dropped, a full disk; the next pass
    retries, and `failures` says so once per episode (then once a minute)."""
    try:
        done = await work
    except errors.Closed:
        raise
    except errors.StoreError as exc:
        failures.failed(exc, clock().timestamp())
        return failed
    failures.worked()
    return done
