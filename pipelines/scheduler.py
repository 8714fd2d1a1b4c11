"""The scheduler: runs each pipeline when it is due, never twice at once.

    scheduler = Scheduler(store, engine, pipelines)
    await scheduler.run_once(now)                  # tests: one deterministic pass
    await scheduler.run_forever(stop, clock=now)   # the bot: until `stop` is set

Due times, pauses and manual requests live in the store (store/schedules.py), so a
restart neither forgets a pause nor replays every slot it missed: after downtime an
overdue pipeline runs once if it is still within its misfire window (schedule.due_action).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from datetime import datetime

from pipelines import config, schedule
from pipelines.engine import Engine
from store import errors, runs, schedules
from store.db import Store
from store.schedules import PipelineState

log = logging.getLogger(__name__)

#: How often run_forever looks at the schedule when nothing wakes it sooner (seconds).
POLL_S = 1.0


class Scheduler:
    def __init__(
        self,
        store: Store,
        engine: Engine,
        pipelines: dict[str, config.Pipeline],
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.engine = engine
        self.pipelines = pipelines
        self._rng = rng or random.Random()
        self._running: dict[str, asyncio.Task[object]] = {}
        self._wake = asyncio.Event()

    def running(self, name: str) -> bool:
        task = self._running.get(name)
        return task is not None and not task.done()

    async def run_once(self, now: datetime, *, wait: bool = True) -> list[str]:
        """Start every pipeline that is due now; with wait, until their ticks finish."""
        states = await schedules.all_states(self.store)
        started = []
        for name, pipeline in self.pipelines.items():
            if self.running(name):
                continue  # never two runs of one pipeline at once
            trigger = await self._decide(pipeline, states.get(name), now)
            if trigger is not None:
                self._running[name] = asyncio.create_task(
                    self._tick(name, trigger, now), name=f"tick-{name}"
                )
                started.append(name)
        if wait:
            await asyncio.gather(*(self._running[name] for name in started), return_exceptions=True)
        return started

    async def _decide(
        self, pipeline: config.Pipeline, state: PipelineState | None, now: datetime
    ) -> runs.Trigger | None:
        """The trigger to run with now, or None; persists the next due time."""
        jitter, rng = pipeline.jitter, self._rng
        if state is None:
            first = schedule.first_due(pipeline.schedule, now, jitter=jitter, rng=rng)
            await schedules.ensure(self.store, pipeline.name, first)
            state = PipelineState(pipeline.name, False, None, first, None)
        if state.paused:
            return None
        if state.run_requested_at is not None:
            following = (
                schedule.next_run(pipeline.schedule, now, jitter=jitter, rng=rng)
                or state.next_due_at
            )
            await schedules.set_due(self.store, pipeline.name, following, started_at=now)
            return "manual"
        decision = schedule.due_action(
            pipeline.schedule,
            state.next_due_at,
            now,
            pipeline.misfire_window,
            jitter=jitter,
            rng=rng,
        )
        if decision.action == schedule.Action.RUN:
            await schedules.set_due(self.store, pipeline.name, decision.next_due_at, started_at=now)
            return "schedule"
        if decision.action == schedule.Action.SKIP_MISSED:
            log.warning(
                "pipeline %s missed its run due %s (outside the misfire window)",
                pipeline.name,
                state.next_due_at,
            )
            await schedules.set_due(self.store, pipeline.name, decision.next_due_at)
        elif state.next_due_at is None and decision.next_due_at is not None:
            await schedules.set_due(self.store, pipeline.name, decision.next_due_at)
        return None

    async def _tick(self, name: str, trigger: runs.Trigger, now: datetime) -> None:
        try:
            await self.engine.tick(name, trigger, now)
        except Exception:
            log.exception("pipeline %s: the run crashed", name)

    async def trigger(self, name: str, now: datetime) -> None:
        """Ask for a manual run; it starts at the next pass (and survives a restart)."""
        self._known(name)
        await schedules.request_run(self.store, name, now)
        self._wake.set()

    async def pause(self, name: str, actor: str, now: datetime) -> bool:
        self._known(name)
        return await schedules.set_paused(self.store, name, True, actor, now)

    async def resume(self, name: str, actor: str, now: datetime) -> bool:
        self._known(name)
        changed = await schedules.set_paused(self.store, name, False, actor, now)
        self._wake.set()
        return changed

    async def states(self) -> dict[str, PipelineState]:
        return await schedules.all_states(self.store)

    def _known(self, name: str) -> None:
        if name not in self.pipelines:
            raise errors.NotFound(
                f"no pipeline {name!r}; known: {', '.join(sorted(self.pipelines)) or 'none'}"
            )

    async def run_forever(self, stop: asyncio.Event, clock: Callable[[], datetime]) -> None:
        """Pass over the schedule every POLL_S (or when woken) until `stop` is set.

        A failed pass escapes to the worker's supervisor (pipelines.workers), which logs
        it, tells the operators once and starts this loop again after a backoff.
        """
        while not stop.is_set():
            self._wake.clear()
            await self.run_once(clock(), wait=False)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)
        await asyncio.gather(*self._running.values(), return_exceptions=True)
