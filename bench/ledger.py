"""Ledger throughput: claim cycles (begin, start_provider, complete) at synchronous=FULL.

    python -m bench ledger [--cycles N] [--workers W] [--latency-ms L]

One cycle is what the engine does for one LLM draft: begin (hold the worst case in
two budgets, the global day and the pipeline's day, for a stored item whose content
hash the claim records), start_provider, the provider call (a sleep of L ms), complete
(check the item's content hash again, settle both holds). The engine drafts many items
at once, so `cycles_per_s` runs W concurrent callers, whose steps share commits in the
store's writer (group commit). The baseline does the same work in plain sqlite3 with
the same pragmas on the same database, in waves of W cycles: one transaction for the
W begins, one for the W starts, one provider latency for the W calls (they run at
once), one transaction for the W completions, so both pay the same fsyncs and the
same waiting. `ratio` = store / baseline. The `sequential_*` figures repeat both with
one caller and one transaction per step.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import sqlite3
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import common
from store import backend, clock, db, items, ledger, sql
from store.backends import datadir
from store.ledger import prices

PIPELINE, ENDPOINT = "bench", "drafts.create"
SCOPES = (PIPELINE, "global")
LEASE = timedelta(minutes=10)
WORST, ACTUAL = 2_000, 1_234
USAGE = prices.Usage(812, 240)
NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)


async def store_cycle(store: db.Store, key: str, item: items.Item, latency: float) -> None:
    call = ledger.Call(key, ENDPOINT, {"k": key}, WORST, PIPELINE, item.id, LEASE)
    work = await ledger.begin(store, call, NOW)
    await ledger.start_provider(store, work.id, NOW)
    await asyncio.sleep(latency)  # the provider call
    await ledger.complete(
        store, work.id, ledger.Actual(ACTUAL, f"req-{key}", USAGE), item.content_hash, NOW
    )


async def run_store(
    data_dir: Path, batch: list[items.Item], workers: int, tag: str, latency: float
) -> float:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        started = time.perf_counter()

        async def worker(w: int) -> None:
            for i in range(w, len(batch), workers):
                await store_cycle(store, f"{tag}-{i}", batch[i], latency)

        await asyncio.gather(*(worker(w) for w in range(workers)))
        return time.perf_counter() - started
    finally:
        await store.close()


def _event(conn: backend.Conn, claim_id: int, old: str | None, new: str, reason: str) -> None:
    fields: dict[str, Any] = {
        "entity": "claim",
        "entity_id": str(claim_id),
        "from_state": old,
        "to_state": new,
        "actor": "system",
        "attempt": 0,
        "reason": reason,
        "at": clock.to_ms(NOW),
    }
    conn.execute(sql.load("events")["insert"], fields)  # unsealed, as events.append writes


def raw_begin(conn: backend.Conn, key: str, item_id: int, day_ms: int, now_ms: int) -> int:
    """The statements begin() runs, without the store around them."""
    cq, bq, slq = sql.load("claims"), sql.load("budgets"), sql.load("budget_slots")
    idem = hashlib.sha256(f"{ENDPOINT}\x00{key}".encode()).hexdigest()
    request = {"pipeline": PIPELINE, "item_id": item_id, "request": {"k": key}}
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
    conn.execute(cq["by_idem"], {"idem_hash": idem}).fetchone()
    item_hash = conn.execute(cq["item_hash"], {"id": item_id}).fetchone()[0]
    conn.execute(bq["limits_for"], {"scopes": json.dumps(list(SCOPES))}).fetchall()
    params = {
        "idem_hash": idem,
        "request_digest": digest,
        "pipeline": PIPELINE,
        "item_id": item_id,
        "item_hash": item_hash,
        "state": "reserved",
        "provider_allowed": 1,
        "reserved_micros": WORST,
        "lease_until": now_ms + 600_000,
        "reason": "holds",
        "now": now_ms,
    }
    claim_id: int = conn.execute(cq["insert"], params).fetchone()[0]
    for scope in SCOPES:
        row = {"scope": scope, "period": "day", "period_start": day_ms}
        if conn.execute(slq["add_hold"], {**row, "micros": WORST}).fetchone() is None:
            # The slot's first hold: its grant (all that is left: one writer, one slot).
            conn.execute(bq["ensure_row"], row)
            limit, granted = conn.execute(slq["lock_budget"], row).fetchone()
            more = {"granted": limit - granted, "micros": WORST}
            conn.execute(slq["add_granted"], {**row, "micros": limit - granted})
            conn.execute(slq["grant_and_hold"], {**row, **more})
    for scope in SCOPES:
        row = {"scope": scope, "period": "day", "period_start": day_ms}
        conn.execute(bq["insert_claim_hold"], {**row, "micros": WORST, "claim_id": claim_id})
    _event(conn, claim_id, None, "reserved", "holds")
    return claim_id


def raw_start(conn: backend.Conn, claim_id: int, now_ms: int) -> None:
    cq = sql.load("claims")
    conn.execute(cq["get"], {"id": claim_id}).fetchone()
    move = {"id": claim_id, "from_state": "reserved", "to_state": "started", "reason": "go"}
    conn.execute(cq["move"], {**move, "now": now_ms}).fetchone()
    _event(conn, claim_id, "reserved", "started", "go")


def raw_complete(conn: backend.Conn, claim_id: int, item_id: int, now_ms: int) -> None:
    cq, bq, sq = sql.load("claims"), sql.load("budgets"), sql.load("ledger_settle")
    slq = sql.load("budget_slots")
    conn.execute(cq["get"], {"id": claim_id}).fetchone()
    conn.execute(cq["item_hash"], {"id": item_id}).fetchone()  # the content check
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
    conn.execute(slq["settle_holds"], {"claim_id": claim_id, "actual": ACTUAL})
    conn.execute(bq["claim_rows"], {"claim_id": claim_id}).fetchall()  # the thresholds
    _event(conn, claim_id, "started", "settled", "settled")


def run_raw(path: Path, batch: list[items.Item], group: int, tag: str, latency: float) -> float:
    """Cycles in waves of `group`: each step of a wave shares one transaction."""
    conn = common.raw_connect(path)
    day_ms, now_ms = clock.to_ms(NOW.replace(hour=0)), clock.to_ms(NOW)
    started = time.perf_counter()
    for first in range(0, len(batch), group):
        wave = list(enumerate(batch[first : first + group], start=first))
        conn.execute("BEGIN IMMEDIATE")
        ids = [raw_begin(conn, f"{tag}-{i}", item.id, day_ms, now_ms) for i, item in wave]
        conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        for claim_id in ids:
            raw_start(conn, claim_id, now_ms)
        conn.execute("COMMIT")
        time.sleep(latency)  # the wave's provider calls, all at once
        conn.execute("BEGIN IMMEDIATE")
        for claim_id, (_, item) in zip(ids, wave, strict=True):
            raw_complete(conn, claim_id, item.id, now_ms)
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


async def setup(data_dir: Path, count: int) -> list[items.Item]:
    """The schema, a day budget in both scopes, and `count` stored items to draft."""
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        for scope in SCOPES:
            await ledger.set_budget(store, ledger.Limit(scope, "day", 10**15), "cli", NOW)

        def unit(conn: backend.Conn) -> list[items.Item]:
            made = [
                items.create_sync(conn, PIPELINE, "s", f"i{n}", {"title": f"story {n}"}, NOW)
                for n in range(count)
            ]
            return [item for item in made if item is not None]

        return await store.write(unit)
    finally:
        await store.close()


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench ledger")
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="each provider call")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the database")
    args = common.parse(parser, argv, cycles=100, workers=4, latency_ms=1.0)
    n, w, latency = args.cycles, args.workers, args.latency_ms / 1000
    seq_n = max(100, n // 20)
    warm_n = max(500, n // 10)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        data_dir = Path(tmp) / "data"
        stock = iter(await setup(data_dir, warm_n + 2 * n + 2 * seq_n))

        def take(count: int) -> list[items.Item]:
            return list(itertools.islice(stock, count))

        path = data_dir / datadir.DB_NAME
        # Warm the page cache and the WAL file first, so neither side pays for it.
        run_raw(path, take(warm_n), w, "warm", 0.0)
        store_s = await run_store(data_dir, take(n), w, "s", latency)
        raw_s = run_raw(path, take(n), w, "r", latency)
        seq_store_s = await run_store(data_dir, take(seq_n), 1, "s1", latency)
        seq_raw_s = run_raw(path, take(seq_n), 1, "r1", latency)
        conn = sqlite3.connect(path)
        settled = conn.execute("SELECT count(*) FROM claims WHERE state = 'settled'").fetchone()[0]
        held = conn.execute("SELECT sum(held_micros) FROM budget_slots").fetchone()[0]
        conn.close()
    assert settled == warm_n + 2 * n + 2 * seq_n and held == 0, (settled, held)
    rate, raw_rate = n / store_s, n / raw_s
    seq_rate, seq_raw_rate = seq_n / seq_store_s, seq_n / seq_raw_s
    common.report(
        {
            "bench": "ledger",
            "synchronous": "FULL",
            "cycles": n,
            "workers": w,
            "scopes": len(SCOPES),
            "provider_latency_ms": args.latency_ms,
            "settled_claims": settled,
            "cycles_per_s": round(rate),
            "raw_cycles_per_s": round(raw_rate),
            "ratio": round(rate / raw_rate, 3),
            "sequential_cycles_per_s": round(seq_rate),
            "sequential_raw_cycles_per_s": round(seq_raw_rate),
            "sequential_ratio": round(seq_rate / seq_raw_rate, 3),
        }
    )
