"""Prometheus metrics: GET /metrics on an opt-in listener (GATEHOUSE_METRICS__LISTEN).

    runtime_config(..., workers=(..., metrics.worker("127.0.0.1:9464")))
    metrics.observe_store(store)            # write latency, once the store is open
    metrics.telegram_error(exc)             # CountingLimiter counts each failed Bot API call

Two kinds of figures. What the store holds (items by state, runs and their counts,
outbox depth, spend and holds, claims, SLA warnings, the WAL) is read at each scrape
in one read transaction (store/reports/figures.py), so the counters always agree with the
store and survive restarts. What only this process sees (Telegram errors, store write
latency, the wait from a card to its decision, each model's calls in flight, its
limit and its 429s) lives in this module's registry or is read at each scrape.
Scrapes closer together than MIN_READ_INTERVAL_S share one read of the store; the age
of the oldest audit event waiting to be sealed is read at every scrape (a partial
index holds only those rows, so it costs one small lookup at any size).
Label values come from bounded sets only: pipelines, states, kinds, scopes, worker
names; never item ids.

Scale-out hook: `set_leader(fn)` replaces the leader check (a single process is always
the leader); `gatehouse_leader` reports it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, exposition
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from telegram import error as tg_error
from telegram.ext import AIORateLimiter
from tornado import web

from bot.web import listen
from pipelines.approval import rule
from pipelines.providers import pace
from pipelines.service import seams
from pipelines.service import workers as workers_mod
from store import errors, outbox
from store.audit import sealer
from store.db import Store
from store.reports import figures

PREFIX = "gatehouse"
#: Seconds one scrape may take reading the store.
SCRAPE_TIMEOUT_S = 10.0
#: Scrapes closer together than this (seconds) share one read of the store's figures.
MIN_READ_INTERVAL_S = 5.0

REGISTRY = CollectorRegistry(auto_describe=True)
TELEGRAM_ERRORS = Counter(
    f"{PREFIX}_telegram_errors",
    "Bot API calls that failed, by kind (rate_limited is Telegram's 429)",
    ["kind"],
    registry=REGISTRY,
)
STORE_WRITE_SECONDS = Histogram(
    f"{PREFIX}_store_write_seconds",
    "Time from queuing a store write to its commit",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY,
)
DECISION_SECONDS = Histogram(
    f"{PREFIX}_decision_seconds",
    "Time from an approval card reaching Telegram to the decision on it",
    ["pipeline", "decision"],
    buckets=(10, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400),
    registry=REGISTRY,
)
#: Error kinds, most specific first (BadRequest and TimedOut are NetworkErrors too).
_KINDS: tuple[tuple[type[Exception], str], ...] = (
    (tg_error.RetryAfter, "rate_limited"),
    (tg_error.BadRequest, "bad_request"),
    (tg_error.TimedOut, "timed_out"),
    (tg_error.Forbidden, "forbidden"),
    (tg_error.InvalidToken, "invalid_token"),
    (tg_error.Conflict, "conflict"),
    (tg_error.NetworkError, "network"),
)

_leader: Callable[[], bool] = lambda: True  # noqa: E731 - one process leads itself


def set_leader(check: Callable[[], bool]) -> None:
    """Report leadership from `check` (for several processes sharing one store)."""
    global _leader
    _leader = check


def telegram_error(exc: BaseException) -> None:
    kind = next((name for cls, name in _KINDS if isinstance(exc, cls)), "other")
    TELEGRAM_ERRORS.labels(kind).inc()


class CountingLimiter(AIORateLimiter):
    """python-telegram-bot's rate limiter, counting every failed Bot API call it passes
    (each try of a retried call). getUpdates bypasses limiters: bot.chat.polling counts it."""

    async def process_request(
        self,
        callback: Callable[..., Awaitable[Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Any:
        async def counted(*a: Any, **kw: Any) -> Any:
            try:
                return await callback(*a, **kw)
            except tg_error.TelegramError as exc:
                telegram_error(exc)
                raise

        return await super().process_request(counted, args, kwargs, endpoint, data, rate_limit_args)


def observe_store(store: Store) -> None:
    store.write_observer = STORE_WRITE_SECONDS.observe


async def decided(store: Store, pipeline: str, decision: rule.Decision, now: datetime) -> None:
    """Observe the wait from the item's card reaching Telegram to a final decision."""
    if decision.outcome not in ("approved", "rejected"):
        return
    version = decision.item.version
    try:
        cards = await outbox.for_item(store, decision.item.id, "card")
    except errors.StoreError:  # a figure is not worth failing the tap's handler
        return
    sent = [c.sent_at for c in cards if c.sent_at and c.payload.get("version") == version]
    if sent:
        waited = (now - min(sent)).total_seconds()
        DECISION_SECONDS.labels(pipeline, decision.outcome).observe(max(waited, 0.0))


def _gauge(name: str, text: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", text, labels=labels)


def _value(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", text, value=value)


def _counter(name: str, text: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", text, labels=labels)


def families(
    snap: figures.Snapshot, wal_bytes: int, states: list[workers_mod.State]
) -> Iterator[Metric]:
    """The store's figures, and this process's leadership and workers, as metric families."""
    items = _gauge("items", "Items by pipeline and state", ["pipeline", "state"])
    for (pipeline, state), n in sorted(snap.items.items()):
        items.add_metric([pipeline, state], n)
    yield items
    yield from _run_families(snap)
    depth = _gauge("outbox_pending", "Outbox rows waiting to be sent", ["kind"])
    age = _gauge("outbox_oldest_pending_seconds", "Age of the oldest waiting outbox row", ["kind"])
    for kind in outbox.KINDS:
        count, oldest = snap.outbox.get(kind, (0, 0.0))
        depth.add_metric([kind], count)
        age.add_metric([kind], oldest)
    yield from (depth, age)
    yield from _budget_families(snap)
    claims = _gauge("claims", "AI spend claims by state and pipeline", ["state", "pipeline"])
    for (state, pipeline), n in sorted(snap.claims.items()):
        claims.add_metric([state, pipeline], n)
    yield claims
    warned = _gauge(
        "sla_warning_items", "Items past 80% of their deadline or in its last 40 s", ["state"]
    )
    for state, n in sorted(snap.sla_warned.items()):
        warned.add_metric([state], n)
    yield warned
    breached = sum(n for (_, state), n in snap.items.items() if state == "breach")
    yield _value("sla_breach_items", "Items in breach (stuck past their SLA)", breached)
    yield _value("store_wal_bytes", "Size of the store's write-ahead log", wal_bytes)
    yield _value("leader", "1 when this process is the leader", int(_leader()))
    up = _gauge(
        "worker_running", "1 while a supervised worker runs or stands by to lead", ["worker"]
    )
    for worker in states:
        up.add_metric([worker.name], int(worker.up))
    yield up


def seal_families(age_s: float, waiting: int) -> Iterator[Metric]:
    """How far the audit chain's sealer trails the writes (see pipelines.service.seal_loop)."""
    yield _value(
        "audit_unsealed_age_seconds",
        "Seconds the oldest audit event has waited to be sealed into the chain (0: none)",
        age_s,
    )
    yield _value("audit_unsealed_events", "Audit events waiting to be sealed", waiting)


def model_families(models: list[pace.Snapshot]) -> Iterator[Metric]:
    """Each model's pace in this process (pipelines/providers/pace.py), read at every scrape."""
    labels = ["model"]
    in_flight = _gauge("llm_calls_in_flight", "LLM calls in flight (turns held)", labels)
    limit = _gauge("llm_call_limit", "LLM calls allowed in flight now, by the pace", labels)
    stated = _gauge("llm_stated_limit", "The request limit the provider last stated", labels)
    recent = _gauge("llm_rate_limited_last_hour", "429s from the provider in the last hour", labels)
    total = _counter("llm_rate_limited", "429s from the provider since this process began", labels)
    for m in models:
        in_flight.add_metric([m.model], m.in_flight)
        limit.add_metric([m.model], m.limit)
        if m.stated is not None:
            stated.add_metric([m.model], m.stated)
        recent.add_metric([m.model], m.rate_limited_last_hour)
        total.add_metric([m.model], m.rate_limited_total)
    yield from (in_flight, limit, stated, recent, total)


def _run_families(snap: figures.Snapshot) -> Iterator[Metric]:
    runs = _counter("runs", "Finished runs by pipeline and outcome", ["pipeline", "status"])
    counted = {
        name: _counter(f"items_{name}", f"Items {name} by runs", ["pipeline"])
        for name in ("fetched", "new", "drafted", "failed")
    }
    per_pipeline: dict[str, dict[str, int]] = {}
    for (pipeline, status), totals in sorted(snap.runs.items()):
        runs.add_metric([pipeline, status], totals.runs)
        sums = per_pipeline.setdefault(pipeline, dict.fromkeys(counted, 0))
        for name in counted:
            sums[name] += getattr(totals, name)
    for pipeline, sums in per_pipeline.items():
        for name, family in counted.items():
            family.add_metric([pipeline], sums[name])
    yield runs
    yield from counted.values()


def _budget_families(snap: figures.Snapshot) -> Iterator[Metric]:
    labels = ["scope", "period"]
    spent = _gauge("budget_spent_micros", "AI spend this period, in micro-USD", labels)
    held = _gauge("budget_held_micros", "AI spend held this period, in micro-USD", labels)
    limit = _gauge("budget_limit_micros", "AI spend limit per period, in micro-USD", labels)
    for b in snap.budgets:
        spent.add_metric([b.scope, b.period], b.spent_micros)
        held.add_metric([b.scope, b.period], b.held_micros)
        limit.add_metric([b.scope, b.period], b.limit_micros)
    yield from (spent, held, limit)


class _Scrape:
    """A one-off collector: this process's registry and the store's figures."""

    def __init__(self, extra: list[Metric]) -> None:
        self.extra = extra

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()
        yield from self.extra


class Scraper:
    """Renders a scrape; the store's figures are read at most once per MIN_READ_INTERVAL_S,
    however often scrapes come (at a million items a read takes about 0.15 s of a
    reader thread: see `python -m bench queries`)."""

    def __init__(self, runtime: seams.Watched) -> None:
        self.runtime = runtime
        self._lock = asyncio.Lock()
        self._read_at = -MIN_READ_INTERVAL_S
        self._figures: list[Metric] = []
        self._seals = sealer.Watch()  # scrapes take turns (the lock): one caller at a time

    async def render(self) -> bytes:
        async with self._lock:
            loop = asyncio.get_running_loop()
            if loop.time() - self._read_at >= MIN_READ_INTERVAL_S:
                rt = self.runtime
                snap = await figures.snapshot(rt.store, sorted(rt.pipelines), rt.now())
                self._figures = list(families(snap, rt.store.wal_bytes(), rt.workers.snapshot()))
                self._read_at = loop.time()
            unsealed = await self._seals.age(self.runtime.store, self.runtime.now())
        now = [*seal_families(*unsealed), *model_families(pace.snapshot())]
        return bytes(exposition.generate_latest(_Scrape(self._figures + now)))


class MetricsHandler(web.RequestHandler):
    def initialize(self, scraper: Scraper) -> None:
        self.scraper = scraper

    async def get(self) -> None:
        if listen.too_many_headers(self):
            self.set_status(431)
            return
        started = time.perf_counter()
        try:
            async with asyncio.timeout(SCRAPE_TIMEOUT_S):
                body = await self.scraper.render()
        except TimeoutError:
            self.set_status(503)
            self.finish("the store did not answer in time\n")
            return
        self.set_header("Content-Type", exposition.CONTENT_TYPE_LATEST)
        self.set_header("X-Scrape-Seconds", f"{time.perf_counter() - started:.3f}")
        self.finish(body)


def make_app(runtime: seams.Watched) -> web.Application:
    observe_store(runtime.store)
    return web.Application(
        [(r"/metrics", MetricsHandler, {"scraper": Scraper(runtime)})],
        log_function=listen.access_log,
    )


def worker(address: str) -> listen.Worker[seams.Watched]:
    return listen.worker("metrics", address, make_app)
