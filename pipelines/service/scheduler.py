"""The scheduler: runs each pipeline when it is due, never twice at once.

    scheduler = Scheduler(store, engine, pipelines)
    await scheduler.run_once(now)                  # tests: one deterministic pass
    await scheduler.run_forever(stop, clock=now)   # the bot: until `stop` is set

Due times, pauses and manual requests live in the store (store/intake/timetable.py), so a
restart neither forgets a pause nor replays every slot it missed: after downtime an
overdue pipeline runs once if it is still within its misfire window (cadence.due_action).

Several workers may share the store: a run starts by compare-and-set on the pipeline's
schedule row together with the run's own row (one running run per pipeline, held by
this worker's lease), so exactly one worker starts each due run. Each worker runs at
most its share of the pipelines at once (the pipelines over the live workers, from
their heartbeats): pipelines due together spread over the workers instead of all
going to whichever looked first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from datetime import datetime

from pipelines.config import spec
from pipelines.ground import cadence
from pipelines.runs.engine import Engine
from store import errors
from store.cluster import heartbeats
from store.db import Store
from store.intake import runs, timetable
from store.intake.timetable import PipelineState

log = logging.getLogger(__name__)

#: How often run_forever looks at the schedule when nothing wakes it sooner (seconds).
POLL_S = 1.0


class Scheduler:
    def __init__(
        self,
        store: Store,
        engine: Engine,
        pipelines: dict[str, spec.Pipeline],
        *,
        rng: random.Random | None = None,
        hold: runs.Hold = runs.LOCAL,
    ) -> None:
        self.store = store
        self.engine = engine
        self.pipelines = pipelines
        self._rng = rng or random.Random()
        #: Who holds the runs this scheduler starts, and for how long unless renewed.
        self.hold = hold
        self._running: dict[str, asyncio.Task[object]] = {}
        self._run_ids: dict[str, int] = {}
        self._wake = asyncio.Event()

    def running(self, name: str) -> bool:
        task = self._running.get(name)
        return task is not None and not task.done()

    def run_ids(self) -> list[int]:
        """The runs this scheduler is running now (their leases are renewed)."""
        return [run_id for name, run_id in self._run_ids.items() if self.running(name)]

    async def run_once(self, now: datetime, *, wait: bool = True) -> list[str]:
        """Start every pipeline that is due now; with wait, until their ticks finish."""
        await self.engine.ask_owed_runs(now)
        states = await timetable.all_states(self.store)
        share = await self._share(now)
        started = []
        for name, pipeline in self.pipelines.items():
            if self.running(name):
                continue  # never two runs of one pipeline at once
            if len(self.run_ids()) >= share:
                break  # the other workers take the rest; or this one, at a later pass
            claimed = await self._decide(pipeline, states.get(name), now)
            if claimed is not None:
                trigger, run_id = claimed
                self._run_ids[name] = run_id
                self._running[name] = asyncio.create_task(
                    self._tick(name, trigger, now, run_id), name=f"tick-{name}"
                )
                started.append(name)
        if wait:
            await asyncio.gather(*(self._running[name] for name in started), return_exceptions=True)
        return started

    async def _share(self, now: datetime) -> int:
        """The runs this worker may hold at once: the pipelines over the live workers
        (a worker that died a moment ago still counts until its heartbeat is stale,
        which only delays a run to a later pass)."""
        found = await heartbeats.recent(self.store, now)
        alive = sum(1 for worker in found if worker.alive(now, self.hold.lease))
        return -(-len(self.pipelines) // max(alive, 1))

    async def _decide(
        self, pipeline: spec.Pipeline, state: PipelineState | None, now: datetime
    ) -> tuple[runs.Trigger, int] | None:
        """The run started now (trigger, run id), or None; persists the next due time."""
        jitter, rng = pipeline.jitter, self._rng
        if state is None:
            first = cadence.first_due(pipeline.schedule, now, jitter=jitter, rng=rng)
            await timetable.ensure(self.store, pipeline.name, first)
            state = PipelineState(pipeline.name, False, None, first, None)
        if state.paused:
            return None
        if state.run_requested_at is not None:
            following = (
                cadence.next_run(pipeline.schedule, now, jitter=jitter, rng=rng)
                or state.next_due_at
            )
            return await self._claim(state, following, "manual", now)
        decision = cadence.due_action(
            pipeline.schedule,
            state.next_due_at,
            now,
            pipeline.misfire_window,
            jitter=jitter,
            rng=rng,
        )
        if decision.action == cadence.Action.RUN:
            return await self._claim(state, decision.next_due_at, "schedule", now)
        if decision.action == cadence.Action.SKIP_MISSED:
            log.warning(
                "pipeline %s missed its run due %s (outside the misfire window)",
                pipeline.name,
                state.next_due_at,
            )
            await timetable.set_due(self.store, pipeline.name, decision.next_due_at)
        elif state.next_due_at is None and decision.next_due_at is not None:
            await timetable.set_due(self.store, pipeline.name, decision.next_due_at)
        return None

    async def _claim(
        self,
        seen: PipelineState,
        next_due_at: datetime | None,
        trigger: runs.Trigger,
        now: datetime,
    ) -> tuple[runs.Trigger, int] | None:
        """Start the run unless another worker did first (or the pipeline runs already)."""
        run_id = await timetable.claim_run(
            self.store, seen, next_due_at, trigger, now, hold=self.hold
        )
        return None if run_id is None else (trigger, run_id)

    async def _tick(self, name: str, trigger: runs.Trigger, now: datetime, run_id: int) -> None:
        try:
            await self.engine.tick(name, trigger, now, run_id=run_id)
        except errors.PASSING as exc:  # weather: the store logs the fault itself
            log.info("pipeline %s: the run stopped on a store fault: %s", name, exc)
        except Exception:
            log.exception("pipeline %s: the run crashed", name)

    async def trigger(self, name: str, now: datetime) -> None:
        """Ask for a manual run; it starts at the next pass (and survives a restart)."""
        self._known(name)
        await timetable.request_run(self.store, name, now)
        self._wake.set()

    async def pause(self, name: str, actor: str, now: datetime) -> bool:
        self._known(name)
        return await timetable.set_paused(self.store, name, True, actor, now)

    async def resume(self, name: str, actor: str, now: datetime) -> bool:
        self._known(name)
        changed = await timetable.set_paused(self.store, name, False, actor, now)
        self._wake.set()
        return changed

    async def states(self) -> dict[str, PipelineState]:
        return await timetable.all_states(self.store)

    def _known(self, name: str) -> None:
        if name not in self.pipelines:
            raise errors.NotFound(
                f"no pipeline {name!r}; known: {', '.join(sorted(self.pipelines)) or 'none'}"
            )

    async def run_forever(self, stop: asyncio.Event, clock: Callable[[], datetime]) -> None:
        """Pass over the schedule every POLL_S (or when woken) until `stop` is set.

        A failed pass escapes to the worker's supervisor (pipelines.service.workers), which logs
        it, tells the operators once and starts this loop again after a backoff.
        """
        while not stop.is_set():
            self._wake.clear()
            await self.run_once(clock(), wait=False)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL_S)
        await self.idle()

    async def idle(self) -> None:
        """Wait for the runs this scheduler started to finish."""
        await asyncio.gather(*self._running.values(), return_exceptions=True)
