"""Long-running workers: supervised, restarted after a crash, visible to health checks.

    registry = workers.Registry(store, clock)
    task = registry.spawn("dispatcher", lambda: dispatch_forever(stop), stop)
    registry.snapshot()                      # [State(name, status, since, restarts, error)]
    workers.down(registry.snapshot())        # those that should run and do not
    await registry.report("dispatcher", exc, "on row 12")   # log it, tell the operators once

A worker is a coroutine factory that runs until `stop` is set. An exception that
escapes it is logged with its traceback at once, reported to the operators once per
worker and kind of error in this process's life (an alert row with a dedupe key),
and the worker starts again after a capped backoff. A worker that ends while the
process runs is `stopped`; `gatehouse health` (through the control socket) and
/status read these states from the registry, which lives in the bot's own process.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from pipelines.ground import retry, waiting
from store import clock, errors, outbox, payloads
from store.db import Store

log = logging.getLogger(__name__)

#: The first wait before a crashed worker starts again (seconds); it doubles per crash.
FIRST_BACKOFF_S = 1.0
#: The longest wait between restarts (seconds): a broken worker costs one log line a minute.
MAX_BACKOFF_S = 60.0
#: A worker that ran this long before crashing again starts its backoff afresh (seconds).
HEALTHY_AFTER_S = 300.0

#: standby: a leader-only worker in a worker that does not lead (pipelines.service.leader).
Status = Literal["running", "restarting", "stopped", "standby"]
#: The statuses of a worker that is where it should be. A leader-only worker on
#: standby in a follower is well: counting it as down would have every health check
#: restart every follower for ever. Health, /status and metrics all use this one rule.
UP: frozenset[str] = frozenset({"running", "standby"})
#: Registry.report's shape: (worker, exception, where) -> tells the operators once.
Report = Callable[[str, BaseException, str], Awaitable[None]]


@dataclass(frozen=True)
class State:
    name: str
    status: Status
    since: datetime
    restarts: int = 0
    #: The last crash: the exception's type and message.
    error: str | None = None

    @property
    def up(self) -> bool:
        """Running, or on standby until this worker leads (see UP)."""
        return is_up(self.status)


def is_up(status: object) -> bool:
    """Whether a worker in `status` (as a State or a ping answer gives it) is well."""
    return status in UP


def down(states: Iterable[State]) -> list[State]:
    """The workers that should run and do not: what health and /status report."""
    return [state for state in states if not state.up]


def waits_for_store(exc: BaseException, what: str, *args: object) -> bool:
    """True for a store fault that passes by itself (errors.PASSING), logged here in one
    line with no traceback: the store logs the episode, and the storage alarm tells the
    operators, so a loop that meets it again and again adds no traceback and no alert."""
    if not isinstance(exc, errors.PASSING):
        return False
    log.warning(f"{what} waits for the store: %s", *args, exc)
    return True


class Registry:
    """The workers of this process and their states; reports faults to the operators."""

    def __init__(
        self,
        store: Store | None,
        now: Callable[[], datetime],
        *,
        first_backoff_s: float = FIRST_BACKOFF_S,
    ) -> None:
        self._store = store
        self._now = now
        self._first_backoff_s = first_backoff_s
        self._states: dict[str, State] = {}
        self._told: set[str] = set()
        # Alerts are "once per process": a restart may tell the operators again.
        self._boot = clock.to_ms(now())

    def snapshot(self) -> list[State]:
        return [self._states[name] for name in sorted(self._states)]

    def standby(self, name: str) -> None:
        """Mark `name` as waiting for this worker to lead."""
        self._set(name, "standby")

    def spawn(
        self, name: str, factory: Callable[[], Awaitable[None]], stop: asyncio.Event
    ) -> asyncio.Task[None]:
        """Run `factory()` as the worker `name` until `stop` is set, restarting it on crashes."""
        self._states[name] = State(name, "running", self._now())
        return asyncio.create_task(self._supervise(name, factory, stop), name=name)

    async def _supervise(
        self, name: str, factory: Callable[[], Awaitable[None]], stop: asyncio.Event
    ) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        try:
            while not stop.is_set():
                started = loop.time()
                try:
                    await factory()
                    return
                except Exception as exc:
                    failures = 1 if loop.time() - started > HEALTHY_AFTER_S else failures + 1
                    delay = retry.backoff_s(failures, self._first_backoff_s, MAX_BACKOFF_S)
                    self._set(name, "restarting", waiting.describe(exc))
                    if not waits_for_store(exc, "worker %s", name):
                        log.exception("worker %s crashed; starting it again in %g s", name, delay)
                        await self.report(name, exc)
                await waiting.wait_any((stop,), delay)
                self._set(name, "running")
        finally:
            self._set(name, "stopped")

    def _set(self, name: str, status: Status, error: str | None = None) -> None:
        old = self._states.get(name, State(name, status, self._now()))
        restarts = old.restarts + (status == "restarting")
        self._states[name] = replace(
            old, status=status, since=self._now(), restarts=restarts, error=error or old.error
        )

    async def report(self, worker: str, exc: BaseException, where: str = "") -> None:
        """Tell the operators, once per worker and kind of error, that `worker` hit `exc`.

        The alert names only the error's type (its message may quote a URL with a
        secret in it); the log line written by the caller has the rest.
        """
        kind = type(exc).__name__
        key = f"worker-fault:{worker}:{kind}:{self._boot}"
        if key in self._told or self._store is None:
            return
        place = f" {where}" if where else ""
        text = f"⚠️ {worker}: unexpected {kind}{place}. It keeps going; details in the log."
        now = self._now()
        try:
            await self._store.write(outbox.alert_sync, payloads.Alert(text=text), now, key=key)
        except errors.StoreError as store_exc:
            log.error("could not queue the alert about %s: %s", worker, store_exc)
            return
        self._told.add(key)
