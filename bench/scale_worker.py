"""One `bench scale` worker process: it runs the project's own parts as a `gatehouse run`
worker does (the scheduler's runs, the engine's drafts, the dispatcher), and approves
its share of the waiting items as an operator's taps would.

    spawn.Process(target=child, args=(store_cfg, folder, index, workers, total, llm,
                                      ready, start, sent))
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from datetime import UTC, datetime, timedelta
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path

import httpx
import psycopg

from bench import scale_llm
from bench import scale_probes as probes
from pipelines.approval import flow, rule
from pipelines.config import spec
from pipelines.runs import engine
from pipelines.service import dispatcher, scheduler, seal_loop
from store import db, items, outbox
from store.backends import pg_conn
from store.cluster import heartbeats
from store.intake import runs
from store.items.machine import State
from store.review.followups import Shown

OPERATOR = 1001
_DISPATCHED = "SELECT count(*) FROM items WHERE state = 'dispatched'"
#: Approvals in flight at once in one worker.
CONCURRENCY = 32
#: How long claimed dispatch rows stay a worker's.
LEASE = timedelta(seconds=60)
#: The longest an idle worker waits for a wake-up before it looks again (seconds): the
#: finish line, and rows another worker left, are seen within it.
IDLE_S = 0.1


def utcnow() -> datetime:
    return datetime.now(UTC)


class Worker:
    """One worker process's loop: claim runs, approve its share, dispatch."""

    def __init__(
        self, store: db.Store, folder: Path, index: int, workers: int, llm: scale_llm.Target | None
    ) -> None:
        self.store = store
        self.drafters = scale_llm.drafters(llm) if llm else None
        self.pipelines = spec.load_dir(folder).pipelines
        self.index, self.workers = index, workers
        self.me = f"bench-{index}"
        self._beat_at = 0.0
        url = store.config.database_url
        self.finish_line = None if url is None else psycopg.connect(url, autocommit=True)

    async def run(self, total: int) -> None:
        stop = asyncio.Event()
        sealing_task = None
        if self.index == 0:  # the leader's sealer
            delay = timedelta(seconds=seal_loop.MAX_SEAL_DELAY_S)
            seal = seal_loop.run(self.store, utcnow, seal_loop.SEAL_EVERY_S, delay, stop)
            sealing_task = asyncio.create_task(seal)
        try:
            await self._work(total)
        finally:
            stop.set()
            if sealing_task is not None:
                await sealing_task

    async def _work(self, total: int) -> None:
        async with httpx.AsyncClient() as client:
            drafter_for = functools.partial(self.drafters, self.store) if self.drafters else None
            eng = engine.Engine(self.store, self.pipelines, client=client, drafter_for=drafter_for)
            sched = scheduler.Scheduler(self.store, eng, self.pipelines, hold=runs.Hold(self.me))
            # Woken as `gatehouse run`'s workers are: by a card or a dispatch row committed
            # (here or by another worker), not by a look every few milliseconds.
            woken = outbox.wakeup(self.store, ["card", "dispatch"])
            passed_at = -scheduler.POLL_S
            while await self.dispatched() < total:
                woken.clear()  # before looking, so a row committed meanwhile wakes the wait
                now = utcnow()
                await self.beat(now, sched)
                if time.monotonic() - passed_at >= scheduler.POLL_S:  # its pace in production
                    passed_at = time.monotonic()
                    await sched.run_once(now, wait=False)
                approved = await self.approve(now)
                handled = await dispatcher.run_once(
                    self.store, self.pipelines, client, now, worker=self.me, lease=LEASE
                )
                if not approved and not handled:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), IDLE_S)
            await sched.idle()  # the last runs record their counts
            if self.drafters is not None:
                await self.drafters.aclose()

    async def beat(self, now: datetime, sched: scheduler.Scheduler | None = None) -> None:
        """Say this worker is alive, every second, as `gatehouse run` does: the
        schedulers split the pipelines over the live workers."""
        if time.monotonic() - self._beat_at < 1.0:
            return
        self._beat_at = time.monotonic()
        me = heartbeats.Me(self.me, "bench", os.getpid())
        run_ids = sched.run_ids() if sched else []
        await heartbeats.beat(self.store, me, now, runs.DEFAULT_LEASE, run_ids)

    async def approve(self, now: datetime) -> int:
        """Approve this worker's share of the waiting items (an operator's taps)."""
        waiting = await items.in_state(self.store, State.AWAITING_APPROVAL, limit=500)
        mine = [item for item in waiting if item.id % self.workers == self.index]
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(item: items.Item) -> None:
            async with gate:
                pipeline = self.pipelines[item.pipeline]
                await flow.decide(
                    self.store,
                    pipeline,
                    rule.Vote(Shown(item.id, item.attempt, item.version), OPERATOR, "approve"),
                    now,
                )

        await asyncio.gather(*map(one, mine))
        return len(mine)

    async def dispatched(self) -> int:
        """Items dispatched so far: the bench's finish line. On PostgreSQL it is read over
        a connection of its own, so the statements counted are the workers' alone."""
        if self.finish_line is not None:
            cursor = await asyncio.to_thread(self.finish_line.execute, _DISPATCHED)
            [(count,)] = cursor.fetchall()
            return int(count)
        found = await items.counts(self.store, self.pipelines, [State.DISPATCHED])
        return sum(by_state.get(State.DISPATCHED, 0) for by_state in found.values())


def child(store_cfg: db.StoreConfig, folder: Path, index: int, workers: int, total: int,
          llm: scale_llm.Target | None, ready: Event, start: Event,
          sent: Queue[dict[str, int]]) -> None:  # fmt: skip
    """A worker process: open the store, say ready, wait for the start, work until done;
    `sent` gets the statements it sent to PostgreSQL meanwhile, by statement, and the
    round trips that carried them (under probes.TRIPS)."""

    async def go() -> None:
        store = await db.open(store_cfg)
        try:
            worker = Worker(store, folder, index, workers, llm)
            await worker.beat(utcnow())
            ready.set()
            await asyncio.to_thread(start.wait)
            before, trips = pg_conn.statements_by_label(), pg_conn.round_trips()
            await worker.run(total)
            by_label = probes.since(before, pg_conn.statements_by_label())
            sent.put({**by_label, probes.TRIPS: pg_conn.round_trips() - trips})
            if worker.finish_line is not None:
                worker.finish_line.close()
        finally:
            await store.close()

    asyncio.run(go())
