"""Dedup throughput: filter_unseen + mark_seen in batches of 50 (half new, half seen).

The same work runs through the store API and through plain sqlite3 with the same
pragmas, on the same database, in alternating rounds of one run; `ratio` = the
median store rate / the median raw rate.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import common
from store import clock, db
from store.backends import datadir
from store.intake import seen

PIPELINE, SCOPE, BATCH = "bench", "feed", 50


def fill(path: Path, rows: int) -> None:
    """Pre-fill seen_items through plain sqlite3 in large transactions (setup, not measured)."""
    conn = common.raw_connect(path, "OFF")
    at = clock.to_ms(datetime(2026, 1, 1, tzinfo=UTC))
    step = 200_000
    for start in range(0, rows, step):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO seen_items VALUES (?, ?, ?, ?)",
            ((PIPELINE, SCOPE, f"item-{i:09d}", at) for i in range(start, min(rows, start + step))),
        )
        conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def batches(rows: int, count: int, tag: str, rng: random.Random) -> list[list[str]]:
    out = []
    for b in range(count):
        old = [f"item-{rng.randrange(rows):09d}" for _ in range(BATCH // 2)]
        new = [f"new-{tag}-{b}-{j}" for j in range(BATCH - BATCH // 2)]
        mixed = old + new
        rng.shuffle(mixed)
        out.append(mixed)
    return out


async def run_store(data_dir: Path, work: list[list[str]]) -> tuple[float, list[float]]:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    now = datetime.now(UTC)
    lat: list[float] = []
    try:
        started = time.perf_counter()
        for ids in work:
            t0 = time.perf_counter()
            unseen = await store.read(seen.filter_unseen_sync, PIPELINE, SCOPE, ids)
            lat.append((time.perf_counter() - t0) * 1000)
            if unseen:  # nothing new: no write transaction
                await store.write(seen.mark_seen_sync, PIPELINE, SCOPE, unseen, now)
        elapsed = time.perf_counter() - started
    finally:
        await store.close()
    return elapsed, lat


def run_raw(path: Path, work: list[list[str]]) -> float:
    conn = common.raw_connect(path)
    at = clock.to_ms(datetime.now(UTC))
    started = time.perf_counter()
    for ids in work:
        marks = ",".join("?" * len(ids))
        query = (
            f"SELECT item_id FROM seen_items WHERE pipeline=? AND scope=? AND item_id IN ({marks})"
        )
        found = {row[0] for row in conn.execute(query, (PIPELINE, SCOPE, *ids))}
        unseen = [i for i in ids if i not in found]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT OR IGNORE INTO seen_items VALUES (?, ?, ?, ?)",
            [(PIPELINE, SCOPE, i, at) for i in unseen],
        )
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench dedup")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5, help="alternating measurements")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the database")
    args = common.parse(parser, argv, rows=2000, batches=20, rounds=2)
    rng = random.Random(42)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        data_dir = Path(tmp) / "data"
        store = await db.open(db.StoreConfig(data_dir=data_dir))  # creates the schema
        await store.close()
        path = data_dir / datadir.DB_NAME
        print(f"filling {args.rows:,} rows ...", flush=True)
        fill(path, args.rows)
        # Warm the page cache and the WAL file first, so neither side pays for it; then
        # rounds alternate store and plain sqlite3 so both meet the same disk weather.
        run_raw(path, batches(args.rows, max(100, args.batches // 5), "warm", rng))
        store_rates, raw_rates, lat = [], [], []
        per_round = max(1, args.batches // args.rounds)
        for n in range(args.rounds):
            store_s, round_lat = await run_store(
                data_dir, batches(args.rows, per_round, f"s{n}", rng)
            )
            raw_s = run_raw(path, batches(args.rows, per_round, f"r{n}", rng))
            store_rates.append(per_round * BATCH / store_s)
            raw_rates.append(per_round * BATCH / raw_s)
            lat += round_lat
        with contextlib.closing(sqlite3.connect(path)) as conn:
            total = conn.execute("SELECT count(*) FROM seen_items").fetchone()[0]
    store_rate, raw_rate = common.median(store_rates), common.median(raw_rates)
    common.report(
        {
            "bench": "dedup",
            "rows": args.rows,
            "rows_after": total,
            "batches": args.batches,
            "rounds": args.rounds,
            "store_items_per_s": round(store_rate),
            "raw_items_per_s": round(raw_rate),
            "ratio": round(store_rate / raw_rate, 3),
            "filter_p50_ms": round(common.percentile(lat, 50), 3),
            "filter_p99_ms": round(common.percentile(lat, 99), 3),
        }
    )
