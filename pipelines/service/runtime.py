"""The engine's lifecycle: the store, the scheduler, the SLA sweep and the workers,
started together and stopped together in one event loop.

    runtime = await Runtime.start(RuntimeConfig(store=..., pipelines_dir=...))
    runtime.spawn("outbox-sender", lambda: sender.run(stop), stop)   # one more worker
    workers.down(runtime.workers.snapshot())   # what health and /status report
    await runtime.stop()                  # a clean stop (below)

Every long-running part runs under `runtime.workers` (pipelines.service.workers): a crash is
logged, reported once and followed by a restart after a capped backoff.
`now` comes from one clock function, so tests can drive time.

A clean stop goes in order: take no new work (`take_no_new_work`: no run starts, no
draft begins, not even one that was waiting for a turn of its model's client, the
workers end), let what is in flight finish or park (`finish_work`:
drafts already at the provider are kept; items not begun stay where they are for the
next start), then stand down as the leader, whose last act seals every event written
and signs the head, then close. It fits the 30 s the deploy files give a stop.

Several runtimes may share one store (PostgreSQL), each a worker with a heartbeat.
Any worker runs the scheduler (a run is claimed by one) and dispatches (rows are
claimed with a lease); the sweeps, and what the bot adds with `runtime.lead(...)`,
run only on the leader (pipelines.service.leader). On SQLite the one process always leads.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from pipelines.approval import flow, sla
from pipelines.config import schedules, spec
from pipelines.drafting import drafters
from pipelines.ground import httpclient, waiting
from pipelines.runs import engine, fulltext
from pipelines.service import leader, seal_loop, workers
from pipelines.service.scheduler import Scheduler
from pipelines.sources import articles
from store import db, errors, ledger, outbox, payloads
from store.cluster import heartbeats
from store.db import Store
from store.intake import runs
from store.upkeep import retention, startup

log = logging.getLogger(__name__)

#: How often the SLA sweep and claim recovery run (seconds); deadlines are minutes long.
SWEEP_EVERY_S = 30.0
#: Seconds a clean stop gives the work in flight (drafts at the provider, a dispatch,
#: a tap) before cancelling it: with the leader's STAND_DOWN_S for its duties and the
#: last seal and signature, a stop stays inside the deploy files' 30 s
#: (TimeoutStopSec, stop_grace_period).
STOP_WORK_S = 12.0
#: How long claimed dispatch rows stay a worker's (seconds): longer than a batch takes
#: to deliver, and what a worker that dies holding rows delays them by at most.
DISPATCH_LEASE_S = 300.0

Worker = Callable[["Runtime", asyncio.Event], Awaitable[None]]
Sweep = Callable[[Store, datetime], Awaitable[object]]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RuntimeConfig:
    store: db.StoreConfig
    pipelines_dir: Path
    #: What pipeline files are checked against (operators for quorums, source byte caps).
    load_context: spec.LoadContext = field(default_factory=spec.LoadContext)
    clock: Callable[[], datetime] = utcnow
    #: Builds each pipeline's drafter from the open store (the LLM drafter needs the ledger).
    drafter_for: Callable[[Store, spec.Pipeline], drafters.Drafter] | None = None
    #: The first wait before a crashed worker starts again (doubles per crash, capped).
    first_backoff_s: float = workers.FIRST_BACKOFF_S
    #: Background workers beyond the built-in ones: each runs until the stop event is set.
    workers: tuple[Worker, ...] = field(default=())
    #: Workers that run only on the leader, each until its stop event is set.
    duties: tuple[Worker, ...] = field(default=())
    #: New items one tick drafts at most (GATEHOUSE_ENGINE__MAX_ITEMS_PER_TICK).
    max_items_per_tick: int = engine.MAX_ITEMS_PER_TICK
    #: The leader's lease; heartbeats and renewals come every quarter of it.
    lease_ttl: timedelta = timedelta(seconds=leader.TTL_S)
    #: How long a worker holds the dispatch rows it claimed before others may take them.
    dispatch_lease: timedelta = timedelta(seconds=DISPATCH_LEASE_S)
    #: Seconds between passes of the SLA sweep, claim recovery and retention.
    sweep_every_s: float = SWEEP_EVERY_S
    #: Seconds between the leader's sealing passes over the audit chain.
    seal_every_s: float = seal_loop.SEAL_EVERY_S
    #: How long an audit event may wait to be sealed before the operators are told.
    max_seal_delay: timedelta = timedelta(seconds=seal_loop.MAX_SEAL_DELAY_S)


class Runtime:
    def __init__(
        self, cfg: RuntimeConfig, store: Store, loaded: spec.LoadResult, client: httpx.AsyncClient
    ) -> None:
        self.config = cfg
        self.store = store
        self.loaded = loaded
        self.pipelines = loaded.pipelines
        self.client = client
        drafter_for = functools.partial(cfg.drafter_for, store) if cfg.drafter_for else None
        self.engine = engine.Engine(
            store,
            self.pipelines,
            client=client,
            drafter_for=drafter_for,
            max_items_per_tick=cfg.max_items_per_tick,
        )
        #: This process as one of the workers sharing the store.
        self.me = heartbeats.Me.here()
        self.scheduler = Scheduler(
            store, self.engine, self.pipelines, hold=runs.Hold(self.me.id, self.run_lease)
        )
        #: Set at a clean stop's first step: take no new work.
        self.stopping = asyncio.Event()
        #: Set at its last: the heartbeat, which keeps the leader's lease meanwhile, ends.
        self._closing = asyncio.Event()
        self.workers = workers.Registry(store, cfg.clock, first_backoff_s=cfg.first_backoff_s)
        self.leader = leader.Leadership(
            store, self.me.id, cfg.lease_ttl, cfg.clock, self.workers, exclusive=exclusive(store)
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def run_lease(self) -> timedelta:
        """A run's lease, renewed by every heartbeat: two leader TTLs."""
        return self.config.lease_ttl * 2

    def now(self) -> datetime:
        return self.config.clock()

    @classmethod
    async def start(cls, cfg: RuntimeConfig) -> Runtime:
        store = await db.open(cfg.store)
        try:
            await startup.recover(store, cfg.clock(), exclusive=exclusive(store))
            loaded = spec.load_dir(cfg.pipelines_dir, cfg.load_context)
            await _report_config_errors(store, loaded, cfg.clock())
            await _recheck_quorums(store, loaded.pipelines, cfg.clock())
            _say_not_scheduled(loaded.pipelines)
        except BaseException:
            await store.close()
            raise
        runtime = cls(
            cfg, store, loaded, httpclient.fetching(timeout=httpx.Timeout(30.0, connect=10.0))
        )
        if fulltext.used(loaded.pipelines.values()):
            await articles.warm()  # before the freeze below, so the extractor is frozen too
        # Everything start-up allocated (modules, models, the bot) leaves the collector's
        # reach: a full collection then scans only what came later, instead of stalling
        # the event loop, and every tap waiting on it, for a tenth of a second or more.
        gc.freeze()
        stopping = runtime.stopping
        await runtime._beat()
        await runtime.leader.step()
        runtime._heartbeat = runtime.workers.spawn(
            "heartbeat", runtime._heartbeat_forever, runtime._closing
        )
        runtime.spawn("scheduler", lambda: runtime.scheduler.run_forever(stopping, cfg.clock))
        sweeps = (
            ("sla-sweep", sla.sweep, cfg.sweep_every_s),
            ("claim-recovery", ledger.recover, cfg.sweep_every_s),
            ("retention", retention.prune, cfg.sweep_every_s),
            ("run-recovery", startup.recover_lapsed, cfg.lease_ttl.total_seconds()),
        )
        for name, job, every in sweeps:
            runtime.lead(name, functools.partial(runtime._sweep_forever, name, job, every))
        seal = functools.partial(
            seal_loop.run, store, cfg.clock, cfg.seal_every_s, cfg.max_seal_delay
        )
        runtime.lead("sealer", seal)
        for duty in cfg.duties:
            runtime.lead(_name(duty, runtime.workers), functools.partial(duty, runtime))
        for worker in cfg.workers:
            runtime.spawn(_name(worker, runtime.workers), _bind(worker, runtime))
        log.info(
            "engine started with %d pipeline(s): %s",
            len(runtime.pipelines),
            ", ".join(runtime.pipelines),
        )
        return runtime

    def spawn(
        self,
        name: str,
        factory: Callable[[], Awaitable[None]],
        stop: asyncio.Event | None = None,
    ) -> asyncio.Task[None]:
        """Run a supervised worker until `stop` (default: the runtime's own stop) is set."""
        task = self.workers.spawn(name, factory, stop or self.stopping)
        self._tasks.append(task)
        return task

    def lead(self, name: str, duty: leader.Duty) -> None:
        """Run `duty(stop)` as the worker `name` whenever this worker is the leader."""
        self.leader.lead(name, duty)

    async def _sweep_forever(
        self, name: str, job: Sweep, every_s: float, stop: asyncio.Event
    ) -> None:
        """Run a sweep every `every_s`; a failed pass is reported and tried next time."""
        while not stop.is_set():
            try:
                await job(self.store, self.now())
            except errors.Closed:
                return
            except Exception as exc:
                if not workers.waits_for_store(exc, "%s", name):
                    log.exception("%s failed; trying again in %g s", name, every_s)
                    await self.workers.report(name, exc)
            await waiting.wait_any((stop,), every_s)

    async def _beat(self) -> None:
        run_ids = self.scheduler.run_ids()
        await heartbeats.beat(self.store, self.me, self.now(), self.run_lease, run_ids)

    async def _heartbeat_forever(self) -> None:
        """Say this worker is alive and renew (or seek) the leader's lease, every quarter
        of its TTL. A failed beat escapes to the supervisor, which reports it."""
        while not self._closing.is_set():
            await waiting.wait_any((self._closing,), self.leader.renew_every_s)
            if self._closing.is_set():
                return
            await self.leader.step()  # first: the lease has the tighter deadline
            await self._beat()

    def take_no_new_work(self) -> None:
        """A clean stop's first step: no run starts, no draft begins, the workers end."""
        self.stopping.set()
        self.engine.park()
        # Drafts past the engine's gate that wait for a turn of the model's client begin
        # nothing once they get it (choice.Drafters.park): only calls already out finish.
        park = getattr(self.config.drafter_for, "park", None)
        if park is not None:
            park()

    async def finish_work(self) -> None:
        """Let the work in flight finish or park (cancelled after STOP_WORK_S); the
        leader's duties and the heartbeat go on meanwhile."""
        self.take_no_new_work()
        await _within(self._tasks, STOP_WORK_S)

    async def stop(self) -> None:
        """A clean stop: finish the work, stand down as the leader (its last act seals
        what this process wrote and signs the head), then close the client and store."""
        await self.finish_work()
        await self.leader.stand_down()
        self._closing.set()
        with contextlib.suppress(errors.StoreError):
            await heartbeats.stopped(self.store, self.me.id, self.now())
        await _within([self._heartbeat] if self._heartbeat else [], STOP_WORK_S)
        await self.client.aclose()
        await self.store.close()


async def _within(tasks: list[asyncio.Task[None]], seconds: float) -> None:
    """Wait for `tasks` to end, cancelling those still running after `seconds`."""
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=seconds)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def exclusive(store: Store) -> bool:
    """Whether this process alone can open the store (SQLite's writer lock): then no
    other worker can be alive, and this one leads and recovers without waiting."""
    return not store.shared


def _bind(worker: Worker, runtime: Runtime) -> Callable[[], Awaitable[None]]:
    return lambda: worker(runtime, runtime.stopping)


def _name(worker: Worker, registry: workers.Registry) -> str:
    """A worker's name in health and /status: its module's ("control", "dispatcher")."""
    base = str(getattr(worker, "__module__", "worker")).rsplit(".", 1)[-1]
    taken = {state.name for state in registry.snapshot()}
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    return name


async def _recheck_quorums(
    store: Store, pipelines: dict[str, spec.Pipeline], now: datetime
) -> None:
    """Cards whose version too few may approve under the rules as loaded say so."""
    flagged = await flow.recheck(store, pipelines, now)
    if flagged:
        log.warning("%d waiting item(s) cannot reach their quorum; their cards say so", flagged)


def _say_not_scheduled(pipelines: dict[str, spec.Pipeline]) -> None:
    for name in sorted(name for name, pipeline in pipelines.items() if pipeline.publish):
        log.warning("pipeline %s: %s", name, schedules.NOT_YET)


async def _report_config_errors(store: Store, loaded: spec.LoadResult, now: datetime) -> None:
    """A bad pipeline file stops only itself: log it and tell the operators once."""
    for error in loaded.errors:
        log.error("pipeline file rejected: %s", error)
    if not loaded.errors:
        return
    text = "⚠️ pipeline files rejected at startup:\n" + spec.format_errors(loaded.errors)
    key = "config-errors:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    await store.write(outbox.alert_sync, payloads.Alert(text=text), now, key=key)
