"""The engine's lifecycle: the store, the scheduler, the SLA sweep and the workers,
started together and stopped together in one event loop.

    runtime = await Runtime.start(RuntimeConfig(store=..., pipelines_dir=...))
    ...                                   # the bot runs beside it in the same loop
    await runtime.stop()

`now` comes from one clock function, so tests can drive time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from pipelines import config, drafters
from pipelines.engine import Engine
from pipelines.scheduler import Scheduler
from store import db, ledger, outbox, retention, sla, startup
from store.db import Store

log = logging.getLogger(__name__)

#: How often the SLA sweep and claim recovery run (seconds); deadlines are minutes long.
SWEEP_EVERY_S = 30.0


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RuntimeConfig:
    store: db.StoreConfig
    pipelines_dir: Path
    clock: Callable[[], datetime] = utcnow
    #: Builds each pipeline's drafter from the open store (the LLM drafter needs the ledger).
    drafter_for: Callable[[Store, config.Pipeline], drafters.Drafter] | None = None
    #: Background workers beyond the built-in ones: each runs until the stop event is set.
    workers: tuple[Callable[[Runtime, asyncio.Event], Awaitable[None]], ...] = field(default=())


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
        self.engine = Engine(store, self.pipelines, client=client, drafter_for=drafter_for)
        self.scheduler = Scheduler(store, self.engine, self.pipelines)
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def now(self) -> datetime:
        return self.config.clock()

    @classmethod
    async def start(cls, cfg: RuntimeConfig) -> Runtime:
        store = await db.Store.open(cfg.store)
        try:
            await startup.recover(store, cfg.clock())
            loaded = config.load_dir(cfg.pipelines_dir)
            await _report_config_errors(store, loaded, cfg.clock())
        except BaseException:
            await store.close()
            raise
        runtime = cls(
            cfg, store, loaded, httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=10.0))
        )
        runtime._spawn("scheduler", runtime.scheduler.run_forever(runtime.stopping, cfg.clock))
        runtime._spawn("sla-sweep", runtime._sweep_forever())
        for worker in cfg.workers:
            runtime._spawn(getattr(worker, "__name__", "worker"), worker(runtime, runtime.stopping))
        log.info(
            "engine started with %d pipeline(s): %s",
            len(runtime.pipelines),
            ", ".join(runtime.pipelines),
        )
        return runtime

    def _spawn(self, name: str, work: Awaitable[None]) -> None:
        async def guarded() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background task %s crashed", name)

        self._tasks.append(asyncio.create_task(guarded(), name=name))

    async def _sweep_forever(self) -> None:
        """The SLA sweep, recovery of ledger claims whose lease expired, and retention."""
        jobs = (
            ("SLA sweep", sla.sweep),
            ("claim recovery", ledger.recover),
            ("retention", retention.prune),
        )
        while not self.stopping.is_set():
            for name, job in jobs:
                try:
                    await job(self.store, self.now())
                except Exception:
                    log.exception("%s failed", name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), SWEEP_EVERY_S)

    async def stop(self) -> None:
        """Stop the workers (they finish what they hold), then close the client and store."""
        self.stopping.set()
        _, pending = await asyncio.wait(self._tasks, timeout=10) if self._tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await self.client.aclose()
        await self.store.close()


async def _report_config_errors(store: Store, loaded: config.LoadResult, now: datetime) -> None:
    """A bad pipeline file stops only itself: log it and tell the operators once."""
    for error in loaded.errors:
        log.error("pipeline file rejected: %s", error)
    if not loaded.errors:
        return
    text = "⚠️ pipeline files rejected at startup:\n" + config.format_errors(loaded.errors)
    key = "config-errors:" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def unit(conn: sqlite3.Connection) -> None:
        outbox.enqueue_sync(
            conn, "alert", outbox.ALERTS, {"text": text, "level": "error"}, now, dedupe_key=key
        )

    await store.write(unit)
