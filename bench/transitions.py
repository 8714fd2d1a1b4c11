"""Transition throughput: a state change plus its event in one transaction, synchronous=FULL.

Three figures in one run: the store API with one caller at a time, plain sqlite3
doing the same UPDATE and INSERT per transaction (same pragmas), and the store API
with 64 concurrent callers (whose transactions share commits).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench import common
from store import clock, db, events, items, machine, sql
from store.machine import State

NOW = datetime(2026, 11, 30, tzinfo=UTC)


async def create_items(store: db.Store, count: int, tag: str) -> list[int]:
    made = await asyncio.gather(
        *(items.create(store, "bench", "s", f"{tag}-{n}", {"n": n}, NOW) for n in range(count))
    )
    return [item.id for item in made if item is not None]


async def sequential(store: db.Store, ids: list[int]) -> float:
    started = time.perf_counter()
    for item_id in ids:
        await items.transition(store, item_id, State.DRAFTING, "system", NOW)
    return len(ids) / (time.perf_counter() - started)


async def concurrent(store: db.Store, ids: list[int], callers: int) -> float:
    queue = list(ids)

    async def caller() -> None:
        while queue:
            await items.transition(store, queue.pop(), State.DRAFTING, "system", NOW)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return len(ids) / (time.perf_counter() - started)


def raw(path: Path, ids: list[int]) -> float:
    """The store's own UPDATE and event INSERT, one transaction each, in plain sqlite3."""
    move, insert = sql.load("items")["move"], sql.load("events")["insert"]
    conn = common.raw_connect(path)
    at = clock.to_ms(NOW)
    deadline = clock.to_ms(NOW + machine.DEADLINES[State.DRAFTING])
    last_id, prev = conn.execute("SELECT id, hash FROM events ORDER BY id DESC LIMIT 1").fetchone()
    started = time.perf_counter()
    for item_id in ids:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            move,
            {
                "id": item_id,
                "from_state": "new",
                "to_state": "drafting",
                "attempt": 1,
                "version": 0,
                "reason": None,
                "now": at,
                "deadline": deadline,
            },
        )
        last_id += 1
        event = {
            "id": last_id,
            "entity": "item",
            "entity_id": str(item_id),
            "from_state": "new",
            "to_state": "drafting",
            "actor": "system",
            "attempt": 1,
            "reason": None,
            "at": at,
            "prev_hash": prev,
        }
        event["hash"] = prev = events.compute_hash(event)
        conn.execute(insert, event)
        conn.execute("COMMIT")
    rate = len(ids) / (time.perf_counter() - started)
    conn.close()
    return rate


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench transitions")
    parser.add_argument(
        "--count", type=int, default=500, help="transitions per round and measurement"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--callers", type=int, default=64)
    args = parser.parse_args(argv)
    seq, con, plain = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        config = db.StoreConfig(data_dir=Path(tmp) / "data")
        # Rounds alternate store and plain sqlite3, so both meet the same disk weather;
        # the medians are reported.
        for round_no in range(args.rounds + 1):
            store = await db.Store.open(config)
            try:
                ids = await create_items(store, args.count * 4, f"r{round_no}")
                await store.checkpoint("TRUNCATE")
                seq_rate = await sequential(store, ids[: args.count])
                con_rate = await concurrent(store, ids[args.count : args.count * 3], args.callers)
            finally:
                await store.close()
            raw_rate = raw(config.db_path, ids[args.count * 3 :])
            if round_no:  # round 0 warms the page cache and the WAL file
                seq.append(seq_rate)
                con.append(con_rate)
                plain.append(raw_rate)
    seq_rate, con_rate, raw_rate = common.median(seq), common.median(con), common.median(plain)
    common.report(
        {
            "bench": "transitions",
            "synchronous": "FULL",
            "rounds": args.rounds,
            "transitions_per_s": round(seq_rate),
            "raw_per_s": round(raw_rate),
            "ratio": round(seq_rate / raw_rate, 3),
            "concurrent_callers": args.callers,
            "concurrent_per_s": round(con_rate),
            "concurrent_ratio": round(con_rate / raw_rate, 3),
        }
    )
