"""The engine's lifecycle: the store, the scheduler, the SLA sweep and the workers,
started together and stopped together in one event loop.

    runtime = await Runtime.start(RuntimeConfig(store=..., pipelines_dir=...))
    runtime.spawn("outbox-sender", lambda: sender.run(stop), stop)   # one more worker
    runtime.workers.not_running()         # what health and /status report
    await runtime.stop()

Every long-running part runs under `runtime.workers` (pipelines.workers): a crash is
logged, reported once and followed by a restart after a capped backoff.
`now` comes from one clock function, so tests can drive time.
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
from datetime import UTC, datetime
from pathlib import Path

import httpx

from pipelines import config, engine, sla, workers
from pipelines.drafting import base as drafters
from pipelines.scheduler import Scheduler
from store import db, errors, ledger, outbox, retention, startup
from store.db import Store

log = logging.getLogger(__name__)

#: How often the SLA sweep and claim recovery run (seconds); deadlines are minutes long.
SWEEP_EVERY_S = 30.0

Worker = Callable[["Runtime", asyncio.Event], Awaitable[None]]
Sweep = Callable[[Store, datetime], Awaitable[object]]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RuntimeConfig:
    store: db.StoreConfig
    pipelines_dir: Path
    #: What pipeline files are checked against (operators for quorums, source byte caps).
    load_context: config.LoadContext = field(default_factory=config.LoadContext)
    clock: Callable[[], datetime] = utcnow
    #: Builds each pipeline's drafter from the open store (the LLM drafter needs the ledger).
    drafter_for: Callable[[Store, config.Pipeline], drafters.Drafter] | None = None
    #: The first wait before a crashed worker starts again (doubles per crash, capped).
    first_backoff_s: float = workers.FIRST_BACKOFF_S
    #: Background workers beyond the built-in ones: each runs until the stop event is set.
    workers: tuple[Worker, ...] = field(default=())
    #: New items one tick drafts at most (GATEHOUSE_ENGINE__MAX_ITEMS_PER_TICK).
    max_items_per_tick: int = engine.MAX_ITEMS_PER_TICK
    #: Seconds between passes of the SLA sweep, claim recovery and retention.
    sweep_every_s: float = SWEEP_EVERY_S


class Runtime:
    def __init__(
        self, cfg: RuntimeConfig, store: Store, loaded: config.LoadResult, client: httpx.AsyncClient
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
        self.scheduler = Scheduler(store, self.engine, self.pipelines)
        self.stopping = asyncio.Event()
        self.workers = workers.Registry(store, cfg.clock, first_backoff_s=cfg.first_backoff_s)
        self._tasks: list[asyncio.Task[None]] = []

    def now(self) -> datetime:
        return self.config.clock()

    @classmethod
    async def start(cls, cfg: RuntimeConfig) -> Runtime:
        store = await db.Store.open(cfg.store)
        try:
            await startup.recover(store, cfg.clock())
            loaded = config.load_dir(cfg.pipelines_dir, cfg.load_context)
            await _report_config_errors(store, loaded, cfg.clock())
        except BaseException:
            await store.close()
            raise
        runtime = cls(
            cfg, store, loaded, httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0))
        )
        # Everything start-up allocated (modules, models, the bot) leaves the collector's
        # reach: a full collection then scans only what came later, instead of stalling
        # the event loop, and every tap waiting on it, for a tenth of a second or more.
        gc.freeze()
        stopping = runtime.stopping
        runtime.spawn("scheduler", lambda: runtime.scheduler.run_forever(stopping, cfg.clock))
        sweeps = (
            ("sla-sweep", sla.sweep),
            ("claim-recovery", ledger.recover),
            ("retention", retention.prune),
        )
        for name, job in sweeps:
            runtime.spawn(name, functools.partial(runtime._sweep_forever, name, job))
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

    async def _sweep_forever(self, name: str, job: Sweep) -> None:
        """Run a sweep every `sweep_every_s`; a failed pass is reported and tried next time."""
        every = self.config.sweep_every_s
        while not self.stopping.is_set():
            try:
                await job(self.store, self.now())
            except errors.Closed:
                return
            except Exception as exc:
                log.exception("%s failed; trying again in %g s", name, every)
                await self.workers.report(name, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), every)

    async def stop(self) -> None:
        """Stop the workers (they finish what they hold), then close the client and store."""
        self.stopping.set()
        _, pending = await asyncio.wait(self._tasks, timeout=10) if self._tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self.client.aclose()
        await self.store.close()


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


async def _report_config_errors(store: Store, loaded: config.LoadResult, now: datetime) -> None:
    """A bad pipeline file stops only itself: log it and tell the operators once."""
    for error in loaded.errors:
        log.error("pipeline file rejected: %s", error)
    if not loaded.errors:
        return
    text = "⚠️ pipeline files rejected at startup:\n" + config.format_errors(loaded.errors)
    key = "config-errors:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    await store.write(outbox.alert_sync, text, now, key=key)
