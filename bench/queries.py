"""The operator's questions on a store of a working installation's size.

    python -m bench queries [--items N] [--repeat R]

Builds (once, then keeps under ~/.cache/gatehouse-bench) a store of N items (default
1,000,000), 4 events per item, N/10 budget claims, runs and budgets, filled by plain
SQL in one transaction; the copy is rebuilt when the schema (or this filling)
changes. Then times the functions the bot and the CLI call, on a read-only store as
`gatehouse status` opens it: /status (operations.overview), /pending (operations.pending),
/budget (operations.budget), /history (operations.history of a random item) and `gatehouse
status` (operations.overview and info.info), a Prometheus scrape's read (figures.snapshot)
and the data of `/status chart` (figures.week). Prints p50 and p99 per question; the last
line is one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sqlite3
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import common
from pipelines import operations
from store import backend, clock, db
from store.backends import generate, migrate
from store.reports import figures, info

#: The newest moment in the built store: items and claims spread over the year before.
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SPAN = timedelta(days=365)
PIPELINES = [f"p{n}" for n in range(5)]
#: Items still awaiting approval: the newest ones, as in a working installation.
AWAITING = 1000
#: Bumped when what `build` writes changes, so kept stores are built again.
BUILD_VERSION = 3

ITEMS = """
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :n)
INSERT INTO items (id, pipeline, scope, source_id, payload, content_hash, state, attempt,
                   version, created_at, last_transition_at, deadline)
SELECT i, 'p' || (i % 5), 'feed', 'guid-' || i,
       json_object('title', 'Story ' || i, 'link', 'https://example.org/story/' || i,
                   'text', 'Body of story number ' || i || '. ' || printf('%.200c', 'x')),
       printf('%064x', i),
       CASE WHEN i > :n - 2 * :awaiting AND i % 2 = 0 THEN 'awaiting_approval'
            WHEN i % 1000 = 1 THEN 'breach'
            WHEN i % 50 = 3 THEN 'rejected'
            WHEN i % 97 = 5 THEN 'failed'
            ELSE 'dispatched' END,
       1, 1, :t0 + i * :step, :t0 + i * :step + 60000,
       CASE WHEN i > :n - 2 * :awaiting AND i % 2 = 0 THEN :t0 + i * :step + 86400000 END
  FROM n
"""

EVENTS = """
INSERT INTO events (id, entity, entity_id, from_state, to_state, actor, attempt, at,
                    prev_hash, seq, hash)
SELECT (i.id - 1) * 4 + k.n, 'item', CAST(i.id AS TEXT), k.from_state,
       coalesce(k.to_state, i.state), 'system', 1, i.created_at + k.n * 1000,
       printf('%064x', (i.id - 1) * 4 + k.n - 1), (i.id - 1) * 4 + k.n,
       printf('%064x', (i.id - 1) * 4 + k.n)
  FROM items i,
       (SELECT 1 AS n, NULL AS from_state, 'new' AS to_state
        UNION ALL SELECT 2, 'new', 'drafting'
        UNION ALL SELECT 3, 'drafting', 'awaiting_approval'
        UNION ALL SELECT 4, 'awaiting_approval', NULL) k
 WHERE k.n < 4 OR i.state != 'awaiting_approval'
 ORDER BY i.id, k.n
"""

CLAIMS = """
WITH RECURSIVE n(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM n WHERE j < :claims)
INSERT INTO claims (id, idem_hash, request_digest, pipeline, item_id, state, provider_allowed,
                    reserved_micros, actual_micros, lease_until, usage, created_at,
                    started_at, ended_at, updated_at)
SELECT j, printf('%064x', j), 'digest', 'p' || (j % 5), j * 10,
       CASE WHEN j % 10000 = 7 THEN 'uncertain' ELSE 'settled' END, 1, 2000,
       CASE WHEN j % 10000 = 7 THEN NULL ELSE 800 + j % 400 END, 0,
       '{"input_tokens": 900, "output_tokens": 300}',
       :t0 + j * :step, :t0 + j * :step, :t0 + j * :step + 2000, :t0 + j * :step + 2000
  FROM n
"""


def cache_dir(items: int) -> Path:
    """Where the built store is kept; its name changes with the schema."""
    schema = generate.SQLITE_SCHEMA.read_bytes()
    names = ",".join(m.path.name for m in migrate.discover()).encode()
    key = hashlib.sha256(schema + names + bytes([BUILD_VERSION])).hexdigest()[:12]
    root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gatehouse-bench"
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    return root / f"queries-{items}-{key}"


async def build(target: Path, items: int) -> float:
    """Fill a new store at `target` (built beside it, then renamed: never half a store)."""
    started = time.perf_counter()
    for stale in target.parent.glob(target.name.rsplit("-", 1)[0] + "-*"):
        shutil.rmtree(stale, ignore_errors=True)  # built for an older schema, or half built
    building = target.with_name(target.name + ".building")
    store = await db.open(db.StoreConfig(data_dir=building))  # the schema, by migrations
    await store.close()
    conn = sqlite3.connect(building / "gatehouse.db", isolation_level=None)
    try:
        # Nobody else has this file open: a rollback journal and no fsyncs while filling.
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")
        t0 = clock.to_ms(NOW - SPAN)
        step = int(SPAN.total_seconds() * 1000) // items
        claims = max(1, items // 10)
        conn.execute("BEGIN")
        conn.execute(ITEMS, {"n": items, "awaiting": AWAITING, "t0": t0, "step": step})
        conn.execute(EVENTS)
        conn.execute(CLAIMS, {"claims": claims, "t0": t0, "step": step * 10})
        _small_tables(conn, t0, step)
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode=WAL")
    finally:
        conn.close()
    building.rename(target)
    return time.perf_counter() - started


def _small_tables(conn: backend.Conn, t0: int, step: int) -> None:
    now = clock.to_ms(NOW)
    for scope, period, limit in (("global", "day", 5_000_000), ("global", "month", 100_000_000)):
        conn.execute(
            "INSERT INTO budget_limits VALUES (?, ?, ?, 'cli', ?)", (scope, period, limit, t0)
        )
    for name in PIPELINES:
        conn.execute(
            "INSERT INTO pipeline_state (pipeline, last_started_at, next_due_at) VALUES (?, ?, ?)",
            (name, now - 60_000, now + 840_000),
        )
        conn.execute(
            "WITH RECURSIVE n(r) AS (SELECT 1 UNION ALL SELECT r + 1 FROM n WHERE r < 2000)"
            " INSERT INTO pipeline_runs (pipeline, trigger, started_at, ended_at, status,"
            " fetched, new, drafted) SELECT ?, 'schedule', ? + r * 900000, ? + r * 900000 + 5000,"
            " 'ok', 40, 10, 10 FROM n",
            (name, now - 2000 * 900_000, now - 2000 * 900_000),
        )


async def timed(call: Callable[[], Awaitable[Any]], repeat: int) -> list[float]:
    for _ in range(5):  # warm the page cache and the statement cache
        await call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench queries")
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=200)
    args = common.parse(parser, argv, items=2000, repeat=5)
    if args.items < 2 * AWAITING:
        parser.error(f"--items must be at least {2 * AWAITING}")
    data_dir = cache_dir(args.items)
    built_s = None
    if not data_dir.exists():
        print(f"building a store of {args.items:,} items in {data_dir} ...", flush=True)
        built_s = round(await build(data_dir, args.items), 1)
        print(f"  built in {built_s} s", flush=True)
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    rng = random.Random(7)
    try:
        questions: dict[str, Callable[[], Awaitable[Any]]] = {
            "status": lambda: operations.overview(store, PIPELINES, NOW),
            "pending": lambda: operations.pending(store),
            "budget": lambda: operations.budget(store, NOW),
            "history": lambda: operations.history(store, rng.randint(1, args.items)),
            "cli_status": lambda: _cli_status(store),
            "metrics_scrape": lambda: figures.snapshot(store, PIPELINES, NOW),
            "status_chart": lambda: figures.week(store, NOW - timedelta(days=7)),
        }
        samples = {name: await timed(call, args.repeat) for name, call in questions.items()}
        pending = len(await operations.pending(store))
    finally:
        await store.close()
    for name, s in samples.items():
        p50, p99 = common.median(s), common.percentile(s, 99)
        print(f"  {name:<12} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms")
    common.report(
        {
            "bench": "queries",
            "items": args.items,
            "p99_ms": {n: round(common.percentile(s, 99), 3) for n, s in samples.items()},
            "p50_ms": {n: round(common.median(s), 3) for n, s in samples.items()},
            "pending_listed": pending,
            "build_s": built_s,
        }
    )


async def _cli_status(store: db.Store) -> None:
    await operations.overview(store, PIPELINES, NOW)
    await info.info(store)
