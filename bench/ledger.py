"""Ledger throughput: claim cycles (begin, start_provider, complete) at synchronous=FULL.

    python -m bench ledger [--cycles N] [--workers W]

One cycle is three write transactions, as the engine runs them: begin (hold the
worst case in the global day budget), start_provider, complete (settle). The
engine drafts many items at once, so `cycles_per_s` runs W concurrent callers,
whose steps share commits in the store's writer (group commit). The baseline
runs the same named statements through plain sqlite3 with the same pragmas on
the same database, W cycles' steps per transaction (the same grouping, so both
pay the same fsyncs); `ratio` = store / raw. The `sequential_*` figures repeat
both with one caller and one transaction per step: there, three fsyncs per cycle
bound both sides, whatever the code around them does.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sqlite3
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import common
from store import clock, datadir, db, events, ledger, prices, sql

PIPELINE, ENDPOINT = "bench", "drafts.create"
LEASE = timedelta(minutes=10)
WORST, ACTUAL = 2_000, 1_234
USAGE = prices.Usage(812, 240)
NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)


async def store_cycle(store: db.Store, key: str) -> None:
    work = await ledger.begin(store, key, ENDPOINT, {"k": key}, WORST, PIPELINE, None, NOW, LEASE)
    await ledger.start_provider(store, work.id, NOW)
    await ledger.complete(store, work.id, USAGE, ACTUAL, f"req-{key}", None, NOW)


async def run_store(data_dir: Path, cycles: int, workers: int, tag: str) -> float:
    store = await db.Store.open(db.StoreConfig(data_dir=data_dir))
    try:
        started = time.perf_counter()
        if workers == 1:
            for i in range(cycles):
                await store_cycle(store, f"{tag}-{i}")
        else:

            async def worker(w: int) -> None:
                for i in range(w, cycles, workers):
                    await store_cycle(store, f"{tag}-{i}")

            await asyncio.gather(*(worker(w) for w in range(workers)))
        return time.perf_counter() - started
    finally:
        await store.close()


def _event(conn: sqlite3.Connection, claim_id: int, old: str | None, new: str, reason: str) -> None:
    q = sql.load("events")
    last_id, prev = conn.execute(q["head"]).fetchone() or (0, events.GENESIS)
    fields: dict[str, Any] = {
        "id": last_id + 1,
        "entity": "claim",
        "entity_id": str(claim_id),
        "from_state": old,
        "to_state": new,
        "actor": "system",
        "attempt": 0,
        "reason": reason,
        "at": clock.to_ms(NOW),
        "prev_hash": prev,
    }
    fields["hash"] = events.compute_hash(fields)
    conn.execute(q["insert"], fields)


def raw_begin(conn: sqlite3.Connection, key: str, day_ms: int, now_ms: int) -> int:
    """The statements begin() runs, without the store around them."""
    cq, bq = sql.load("claims"), sql.load("budgets")
    row = {"scope": "global", "period": "day", "period_start": day_ms}
    idem = hashlib.sha256(f"{ENDPOINT}\x00{key}".encode()).hexdigest()
    digest = hashlib.sha256(json.dumps({"k": key}, sort_keys=True).encode()).hexdigest()
    conn.execute(cq["by_idem"], {"idem_hash": idem}).fetchone()
    conn.execute(bq["limits_for"], {"scopes": json.dumps([PIPELINE, "global"])}).fetchall()
    params = {
        "idem_hash": idem,
        "request_digest": digest,
        "pipeline": PIPELINE,
        "item_id": None,
        "item_hash": None,
        "state": "reserved",
        "provider_allowed": 1,
        "reserved_micros": WORST,
        "lease_until": now_ms + 600_000,
        "reason": "holds",
        "now": now_ms,
    }
    claim_id: int = conn.execute(cq["insert"], params).fetchone()[0]
    conn.execute(bq["ensure_row"], row)
    conn.execute(bq["get_row"], row).fetchone()
    conn.execute(bq["add_hold"], {**row, "micros": WORST})
    conn.execute(bq["insert_claim_hold"], {**row, "micros": WORST, "claim_id": claim_id})
    _event(conn, claim_id, None, "reserved", "holds")
    return claim_id


def raw_start(conn: sqlite3.Connection, claim_id: int, now_ms: int) -> None:
    cq = sql.load("claims")
    conn.execute(cq["get"], {"id": claim_id}).fetchone()
    move = {"id": claim_id, "from_state": "reserved", "to_state": "started", "reason": "go"}
    conn.execute(cq["move"], {**move, "now": now_ms}).fetchone()
    _event(conn, claim_id, "reserved", "started", "go")


def raw_complete(conn: sqlite3.Connection, claim_id: int, day_ms: int, now_ms: int) -> None:
    cq, bq, sq = sql.load("claims"), sql.load("budgets"), sql.load("ledger_settle")
    row = {"scope": "global", "period": "day", "period_start": day_ms}
    conn.execute(cq["get"], {"id": claim_id}).fetchone()
    settle = {
        "id": claim_id,
        "from_state": "started",
        "actual_micros": ACTUAL,
        "evidence": f"req-{claim_id}",
        "usage": json.dumps(USAGE._asdict()),
        "reason": "settled",
        "now": now_ms,
    }
    conn.execute(sq["settle"], settle).fetchone()
    conn.execute(bq["claim_holds"], {"claim_id": claim_id}).fetchall()
    conn.execute(bq["settle_hold"], {**row, "micros": WORST, "actual": ACTUAL}).fetchone()
    _event(conn, claim_id, "started", "settled", "settled")


def run_raw(path: Path, cycles: int, group: int, tag: str) -> float:
    """Cycles in groups: each step of `group` cycles shares one transaction (1 = no grouping)."""
    conn = common.raw_connect(path)
    day_ms, now_ms = clock.to_ms(NOW.replace(hour=0)), clock.to_ms(NOW)
    started = time.perf_counter()
    for first in range(0, cycles, group):
        keys = [f"{tag}-{i}" for i in range(first, min(cycles, first + group))]
        conn.execute("BEGIN IMMEDIATE")
        ids = [raw_begin(conn, key, day_ms, now_ms) for key in keys]
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        for claim_id in ids:
            raw_start(conn, claim_id, now_ms)
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        for claim_id in ids:
            raw_complete(conn, claim_id, day_ms, now_ms)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


async def setup(data_dir: Path) -> None:
    store = await db.Store.open(db.StoreConfig(data_dir=data_dir))  # creates the schema
    try:
        await ledger.set_budget(store, "global", "day", 10**15, "cli", NOW)
    finally:
        await store.close()


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench ledger")
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--dir", type=Path, default=None, help="where to build the database")
    args = parser.parse_args(argv)
    n, w = args.cycles, args.workers
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        data_dir = Path(tmp) / "data"
        await setup(data_dir)
        path = data_dir / datadir.DB_NAME
        # Warm the page cache and the WAL file first, so neither side pays for it.
        run_raw(path, max(500, n // 10), w, "warm")
        store_s = await run_store(data_dir, n, w, "s")
        raw_s = run_raw(path, n, w, "r")
        seq_n = max(200, n // 5)
        seq_store_s = await run_store(data_dir, seq_n, 1, "s1")
        seq_raw_s = run_raw(path, seq_n, 1, "r1")
        conn = sqlite3.connect(path)
        settled = conn.execute("SELECT count(*) FROM claims WHERE state = 'settled'").fetchone()[0]
        conn.close()
    rate, raw_rate = n / store_s, n / raw_s
    seq_rate, seq_raw_rate = seq_n / seq_store_s, seq_n / seq_raw_s
    common.report(
        {
            "bench": "ledger",
            "synchronous": "FULL",
            "cycles": n,
            "workers": w,
            "settled_claims": settled,
            "cycles_per_s": round(rate),
            "raw_cycles_per_s": round(raw_rate),
            "ratio": round(rate / raw_rate, 3),
            "sequential_cycles_per_s": round(seq_rate),
            "sequential_raw_cycles_per_s": round(seq_raw_rate),
            "sequential_ratio": round(seq_rate / seq_raw_rate, 3),
        }
    )
