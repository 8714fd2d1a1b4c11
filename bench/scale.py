"""Items per second through fetch, LLM draft, approval and dispatch, with 1, 2 and 4
worker processes sharing one PostgreSQL database, and the same work on SQLite.

    python -m bench scale [--items 2000] [--pipelines 8] [--template] [--reply-delay S]
                         [--stated-limit N] [--max-calls N]

Each worker is its own process running the project's own parts as a `gatehouse run`
worker does: the scheduler claims a pipeline's run (compare-and-set on its schedule
row, one running run per pipeline) and the engine fetches the pipeline's feed from a
local feed server over a socket, records the items and drafts them with the LLM
drafter through the local fake LLM server (a small delay per reply), each call held
and settled in two budgets, the pipeline's and the global one (bench.scale_llm);
`--template` drafts with the template instead, which spends nothing. At the default
reply delay (20 ms) the work waits on the machine's cores, which the workers share with
the server and the fakes: items/s and CPU per item measure what an item costs. With a
model's delay (`--reply-delay 0.5`) the work waits on the model, each worker drafting
within its provider client's turns (at most `--max-calls`, GATEHOUSE_LLM__MAX_CONCURRENT_CALLS,
16 by default; `--stated-limit N` makes the fake state N calls in its headers, enforced
with 429s, and the turns follow it): nothing but a lock can keep two workers from doing
twice the work of one (`ratio_2`). The worker
approves its share of the waiting items (`flow.decide`, as an operator's tap
does) and dispatches with `dispatcher.run_once`, which claims rows with a lease
(`FOR UPDATE SKIP LOCKED` on PostgreSQL) to a `none` target; as in production, the
scheduler passes once a second and an idle worker waits for a card or dispatch row to be
committed (store.backends.notify), not polling. Worker 0 also runs the
sealer, as the leader does (pipelines.service.seal_loop). The clock runs from the moment every
worker is ready until the last item is dispatched.

On PostgreSQL a sampler reads pg_stat_activity every 20 ms during the run and counts
what the database's busy connections wait on (wait_event_type/wait_event; "CPU/-" is
a backend at work): the table shows whether workers queue on a lock.

SQLite takes the same work in one process (one process holds an SQLite store). The
ratios are items/s with 2 and 4 workers over items/s with one. `pg_statements_per_item`
counts the statements the workers' store connections sent (store.backends.pg_conn.statements_sent:
BEGIN, COMMIT, savepoints and NOTIFYs included, the workers' polling too, but not the
bench's own look at how many items are dispatched; `--by-statement` lists them by name),
`pg_round_trips_per_item` the round trips that carried them (a BEGIN rides with the
statement after it, NOTIFYs with their COMMIT), and `cpu_ms_per_item` the CPU time of
the workers and of a local server per item. With no
PostgreSQL server reachable (GATEHOUSE_TEST_DATABASE_URL, else the local one) it says
why and skips; the last line is one JSON object either way.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import psycopg

from bench import common, scale_llm, scale_worker
from bench import scale_probes as probes
from pipelines.providers import settings
from store import db, items
from store.audit import events, sealer
from store.intake import timetable
from store.items.machine import State
from tests import pg_databases
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.llm_server import FakeLLM

#: The longest one measurement may take (seconds): a stuck worker fails the bench.
TIMEOUT_S = 600.0

PIPELINE = """\
name: {name}
schedule: manual
sources:
  - type: rss
    url: {url}
    scope: feed
dedup:
  duplicate_window_days: 0
{draft}dispatch:
  type: none
"""


def write_pipelines(
    folder: Path, feed: FeedServer, count: int, per_pipeline: int, llm: bool
) -> list[str]:
    """`count` pipelines, each with its own feed of `per_pipeline` entries, drafted by
    the LLM (`llm`) or the template."""
    folder.mkdir()
    if llm:
        scale_llm.write_prompt(folder)
    names = []
    for p in range(count):
        name = f"p{p}"
        entries = [
            (f"{name}-{n}", f"Story {n} of {name}", f"Body {n}: " + "words " * 40)
            for n in range(per_pipeline)
        ]
        feed.set(f"/{name}.xml", rss(entries), "application/rss+xml")
        (folder / f"{name}.yaml").write_text(
            PIPELINE.format(
                name=name, url=feed.url(f"/{name}.xml"), draft=scale_llm.DRAFT if llm else ""
            )
        )
        names.append(name)
    return names


async def prepare(store_cfg: db.StoreConfig, names: list[str], llm: bool) -> None:
    """Create (migrate) the store, set the budgets the LLM drafter spends within, and
    ask each pipeline for one run."""
    store = await db.open(store_cfg)
    try:
        if llm:
            await scale_llm.set_budgets(store, names)
        for name in names:
            await timetable.request_run(store, name, scale_worker.utcnow())
    finally:
        await store.close()


async def check(store_cfg: db.StoreConfig, names: list[str], total: int) -> int:
    """Every item dispatched and the audit chain intact; returns the events written
    (sealing the few written after the sealer's last pass)."""
    store = await db.open(store_cfg)
    try:
        found = await items.counts(store, names, [State.DISPATCHED])
        while await sealer.seal(store):
            pass
        chain = await store.read(events.verify_sync)
    finally:
        await store.close()
    dispatched = sum(by_state.get(State.DISPATCHED, 0) for by_state in found.values())
    assert dispatched == total, (dispatched, total)
    assert chain.ok and chain.pending == 0, chain
    return int(chain.checked)


@dataclass(frozen=True)
class Measured:
    items_per_s: float
    #: Audit events per second, written unsealed and sealed by worker 0's sealer.
    events_per_s: float
    #: The workers' CPU time over the wall time: how many cores they kept busy.
    worker_cores: float
    #: The same for this database's backends on a PostgreSQL server on this machine (0
    #: when it runs elsewhere; other databases on the server are not counted).
    server_cores: float
    #: PostgreSQL only, sampled: lock waits (all, and on the budget rows) and every wait.
    sampled: probes.Sampled = field(default_factory=probes.Sampled)
    #: PostgreSQL only: statements the workers sent per item, and the round trips.
    statements_per_item: float = 0.0
    round_trips_per_item: float = 0.0
    #: CPU milliseconds per item of the workers and of a local server.
    worker_cpu_ms: float = 0.0
    server_cpu_ms: float = 0.0
    #: PostgreSQL only: `statements_per_item` by statement (pg_conn.statements_by_label).
    by_statement: dict[str, float] = field(default_factory=dict)


async def measure(
    store_cfg: db.StoreConfig,
    folder: Path,
    names: list[str],
    workers: int,
    total: int,
    llm: scale_llm.Target | None,
) -> Measured:
    """Items and audit events per second with `workers` processes on this store."""
    await prepare(store_cfg, names, llm is not None)
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Event()
    readies = [spawn.Event() for _ in range(workers)]
    sent: Queue[dict[str, int]] = spawn.Queue()
    procs = [
        spawn.Process(
            target=scale_worker.child,
            args=(store_cfg, folder, i, workers, total, llm, readies[i], start, sent),
        )
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        for ready in readies:
            if not await asyncio.to_thread(ready.wait, 60):
                raise RuntimeError("a worker did not start within 60 s")
        cpu_before = probes.children_cpu_s()
        started = time.perf_counter()
        start.set()
        sampling = threading.Event()
        sampler = asyncio.create_task(asyncio.to_thread(probes.sample_waits, store_cfg, sampling))
        for proc in procs:
            await asyncio.to_thread(proc.join, TIMEOUT_S)
            if proc.exitcode != 0:
                raise RuntimeError(f"a worker ended with exit code {proc.exitcode}")
        elapsed = time.perf_counter() - started
        statements = probes.summed(sent.get(timeout=10) for _ in procs)
        trips = statements.pop(probes.TRIPS, 0)
        sampling.set()
        sampled = await sampler
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
    cores = (probes.children_cpu_s() - cpu_before) / elapsed
    server = sampled.server_cpu_s / elapsed
    written = await check(store_cfg, names, total)
    per_item_ms = elapsed * 1000 / total
    return Measured(
        total / elapsed, written / elapsed, cores, server, sampled,
        statements_per_item=sum(statements.values()) / total,
        round_trips_per_item=trips / total,
        by_statement={label: n / total for label, n in statements.items()},
        worker_cpu_ms=cores * per_item_ms, server_cpu_ms=server * per_item_ms,
    )  # fmt: skip


def _line(found: Measured) -> str:
    line = (
        f"{found.items_per_s:,.0f} items/s, {found.events_per_s:,.0f} audit events/s,"
        f" workers busy on {found.worker_cores:.2f} cores"
    )
    if found.server_cores:
        line += f", the server on {found.server_cores:.2f}"
    line += f"; per item {found.worker_cpu_ms:.2f} ms CPU in the workers"
    if found.server_cores:
        line += f", {found.server_cpu_ms:.2f} ms in the server"
    if found.statements_per_item:
        line += f", {found.statements_per_item:.1f} statements sent"
        line += f" in {found.round_trips_per_item:.1f} round trips"
    if found.sampled.waits:
        line += f"; some connection waited on a lock in {found.sampled.lock_waited:.0%} of samples"
        line += f", on a budget row in {found.sampled.budget_lock_waited:.1%}"
        line += "\n    waits (type/event: connections summed over samples): " + ", ".join(
            f"{name} {n}" for name, n in found.sampled.waits.items()
        )
    return line


def commit_ms(url: str, rounds: int = 200) -> float:
    """One one-row INSERT committed, alone: the server's own cost of a durable commit."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE commit_probe (x integer)")
        started = time.perf_counter()
        for _ in range(rounds):
            with conn.transaction():
                conn.execute("INSERT INTO commit_probe VALUES (1)")
        return (time.perf_counter() - started) / rounds * 1000


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench scale")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--pipelines", type=int, default=8)
    parser.add_argument(
        "--template", action="store_true", help="draft with the template, not the LLM"
    )
    parser.add_argument(
        "--reply-delay", type=float, default=scale_llm.REPLY_DELAY_S,
        help="seconds the fake LLM takes to answer (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--stated-limit", type=int, default=None,
        help="calls in flight the fake LLM states in its headers (and enforces with 429s)",
    )  # fmt: skip
    parser.add_argument(
        "--max-calls", type=int, default=settings.DEFAULT_MAX_CONCURRENT_CALLS,
        help="each worker's ceiling of calls in flight (GATEHOUSE_LLM__MAX_CONCURRENT_CALLS)",
    )  # fmt: skip
    parser.add_argument(
        "--by-statement", action="store_true", help="list PostgreSQL's statements per item"
    )
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2, 4], help="PostgreSQL worker counts"
    )
    args = common.parse(parser, argv, items=64, pipelines=2, workers=[1, 2], reply_delay=0.01)
    server = pg_databases.Server.find()
    if server.unreachable:
        print(f"skipped: no PostgreSQL server ({server.unreachable})")
        common.report({"bench": "scale", "skipped": server.unreachable})
        return
    per_pipeline = args.items // args.pipelines
    total = per_pipeline * args.pipelines
    llm_server = FakeLLM(delay_s=args.reply_delay)
    llm_server.stated_limit = args.stated_limit
    with tempfile.TemporaryDirectory() as tmp, FeedServer() as feed, llm_server as fake:
        llm = None if args.template else scale_llm.Target(fake.base_url, args.max_calls)
        folder = Path(tmp) / "pipelines"
        names = write_pipelines(folder, feed, args.pipelines, per_pipeline, not args.template)
        sqlite_cfg = db.StoreConfig(data_dir=Path(tmp) / "sqlite")
        sqlite = await measure(sqlite_cfg, folder, names, 1, total, llm)
        print(f"  sqlite, 1 worker: {_line(sqlite)}", flush=True)
        pg_found: dict[str, Measured] = {}
        for workers in args.workers:
            name = f"gh_pgscale_bench_{workers}_{os.getpid()}"
            server.drop(name)
            try:
                url = server.create(name)
                if workers == 1:
                    print(f"  postgres: one durable commit alone takes {commit_ms(url):.2f} ms")
                cfg = db.StoreConfig(data_dir=Path(tmp) / f"pg{workers}", database_url=url)
                found = await measure(cfg, folder, names, workers, total, llm)
            finally:
                server.drop(name)
            pg_found[str(workers)] = found
            print(f"  postgres, {workers} worker(s): {_line(found)}", flush=True)
            if args.by_statement:
                print(probes.by_statement(found.by_statement), flush=True)
    load = ", ".join(f"{n:.1f}" for n in os.getloadavg())
    print(f"  {total} items over {args.pipelines} pipelines; {os.cpu_count()} CPUs, load {load}")
    pg_rates = {k: found.items_per_s for k, found in pg_found.items()}
    figures: dict[str, Any] = {
        "bench": "scale",
        "drafter": "template" if args.template else "llm",
        "reply_delay_s": None if args.template else args.reply_delay,
        "llm_stated_limit": args.stated_limit,
        "llm_max_calls": args.max_calls,
        "llm_peak_in_flight": llm_server.peak_in_flight,
        "llm_rate_limited": llm_server.rate_limited,
        "sqlite_items_per_s": round(sqlite.items_per_s),
        "pg_items_per_s": {k: round(v) for k, v in pg_rates.items()},
        **{
            f"ratio_{k}": round(rate / pg_rates["1"], 2)
            for k, rate in pg_rates.items()
            if k != "1" and "1" in pg_rates
        },
        "pg_statements_per_item": {
            k: round(found.statements_per_item, 1) for k, found in pg_found.items()
        },
        "pg_round_trips_per_item": {
            k: round(found.round_trips_per_item, 1) for k, found in pg_found.items()
        },
        "pg_lock_waited": {k: round(found.sampled.lock_waited, 3) for k, found in pg_found.items()},
        "pg_budget_lock_waited": {
            k: round(found.sampled.budget_lock_waited, 3) for k, found in pg_found.items()
        },
        "cpu_ms_per_item": {
            "sqlite": round(sqlite.worker_cpu_ms, 2),
            **{
                f"pg_{k}": {
                    "workers": round(found.worker_cpu_ms, 2),
                    "server": round(found.server_cpu_ms, 2),
                }
                for k, found in pg_found.items()
            },
        },
    }
    common.report(figures)
