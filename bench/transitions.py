"""Transition throughput: a state change plus its event in one transaction, synchronous=FULL.

    python -m bench transitions [--count 500] [--rounds 5] [--callers 64] [--smoke]

Per round: the store API with one caller at a time; plain sqlite3 doing the same work,
one transaction each (same pragmas); the store API with 64 concurrent callers, whose
transactions share commits; and plain sqlite3 doing the same work grouped exactly as the
store grouped it in that round (the group sizes are read from the writer), so both pay
the same fsyncs. `ratio` = one caller / plain one per transaction; `concurrent_ratio` =
64 callers / plain grouped the same way. Each ratio is the median of the rounds' own
ratios: a round's two sides run back to back, so a VM whose speed drifts from one round
to the next (2x within minutes on the VMs this was measured on) moves both alike; the
rates are each side's median over the rounds.

The one caller's time is split in two: `one_caller_in_writer_us`, a transaction's time on
the writer's thread from BEGIN to COMMIT (the same statements as plain sqlite3's
`raw_us`, and the unit's Python around them), and `one_caller_handoff_us`, the rest: the
hand-off to that thread and back, which plain sqlite3 never pays. On a VM the hand-off is
mostly two thread wake-ups across vCPUs, and it moves with the machine, not the code.

"The same work" is the store's own statements, recorded from its unit
(`items.transition_sync` on a connection that notes what it sends, in a transaction rolled
back before the clock starts) and replayed: today a read of the row to decide on, the
compare-and-set UPDATE (which checks the re-entry floor inside) and the INSERT of the
(unsealed) event; the leader's sealer hashes events later, in batches. Recorded, not
copied, so the baseline follows the store's statements as they change. The
`*_update_insert` figures compare with plain sqlite3 sending the writes alone.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sqlite3
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import common
from store import db, items
from store.backends import lanes, sqlite_store, writer
from store.items.machine import State

NOW = datetime(2026, 11, 30, tzinfo=UTC)


async def create_items(store: db.Store, count: int, tag: str) -> list[int]:
    made = await asyncio.gather(
        *(
            store.write(items.create_sync, "bench", "s", f"{tag}-{n}", {"n": n}, NOW)
            for n in range(count)
        )
    )
    return [item.id for item in made if item is not None]


async def sequential(store: db.Store, ids: list[int]) -> float:
    started = time.perf_counter()
    for item_id in ids:
        await store.write(items.transition_sync, item_id, State.DRAFTING, "system", NOW)
    return len(ids) / (time.perf_counter() - started)


async def sequential_split(store: db.Store, ids: list[int]) -> tuple[float, float]:
    """`sequential`'s rate, and the mean seconds a transaction spent on the writer's thread."""
    assert isinstance(store, sqlite_store.SqliteStore), "the writer's thread is SQLite's"
    lane = store._writer_lane  # the bench times the writer's thread; nothing else does
    start, spent = lane.start, []

    # The lane's own start with the batch timed on the thread: the timed caller goes
    # through exactly what an untimed one does, with no extra layer on the loop's side.
    def timed(done: lanes.Done, fn: Callable[..., Any], *args: Any) -> None:
        def on_thread(conn: Any, *rest: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(conn, *rest)
            finally:
                spent.append(time.perf_counter() - started)

        start(done, on_thread if fn is writer.run_batch else fn, *args)

    lane.start = timed  # type: ignore[method-assign]
    try:
        rate = await sequential(store, ids)
    finally:
        lane.start = start  # type: ignore[method-assign]
    return rate, sum(spent) / len(spent)


async def concurrent(store: db.Store, ids: list[int], callers: int) -> float:
    queue = list(ids)

    async def caller() -> None:
        while queue:
            await store.write(items.transition_sync, queue.pop(), State.DRAFTING, "system", NOW)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return len(ids) / (time.perf_counter() - started)


class _Recording:
    """A plain sqlite3 connection that notes each statement a unit sends and its
    parameters: the baseline then sends exactly the store's own, whatever they become."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.sent: list[tuple[str, Any]] = []

    @property
    def in_transaction(self) -> bool:
        return self.conn.in_transaction

    def execute(self, statement: str, parameters: Any = ()) -> sqlite3.Cursor:
        self.sent.append((statement, parameters))
        return self.conn.execute(statement, parameters)

    def executemany(self, statement: str, parameters: Any) -> sqlite3.Cursor:
        raise AssertionError("a single transition sends no executemany; the replay needs one")


def store_statements(conn: sqlite3.Connection, ids: list[int]) -> list[list[tuple[str, Any]]]:
    """Each transition's statements and parameters as the store's own unit sends them
    (items.transition_sync on a recording connection), in a transaction rolled back."""
    recording = _Recording(conn)
    sent: list[list[tuple[str, Any]]] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for item_id in ids:
            recording.sent = []
            items.transition_sync(recording, item_id, State.DRAFTING, "system", NOW)
            sent.append(recording.sent)
    finally:
        conn.execute("ROLLBACK")
    return sent


def _is_read(statement: str) -> bool:
    return statement.lstrip().upper().startswith("SELECT")


def raw(path: Path, ids: list[int], groups: list[int], *, reads: bool = True) -> float:
    """The store's own statements (recorded from its unit, untimed) in plain sqlite3,
    `groups[i]` transitions per transaction; without `reads`, its writes alone (the
    UPDATE and the event's INSERT)."""
    conn = common.raw_connect(path)
    conn.row_factory = sqlite_store.Row  # the rows the store's unit reads its item from
    sent = store_statements(conn, ids)
    if not reads:
        sent = [[(q, p) for q, p in one if not _is_read(q)] for one in sent]
    pending = iter(sent)
    started = time.perf_counter()
    for size in groups:
        conn.execute("BEGIN IMMEDIATE")
        for statements in itertools.islice(pending, size):
            for statement, parameters in statements:
                conn.execute(statement, parameters).fetchall()
        conn.execute("COMMIT")
    rate = sum(groups) / (time.perf_counter() - started)
    conn.close()
    return rate


def record_groups(store: db.Store) -> list[int]:
    """The number of units in each transaction the store's writer runs from now on."""
    sizes: list[int] = []
    assert isinstance(store, sqlite_store.SqliteStore), "the writer's grouping is SQLite's"
    lane = store._writer_lane  # the bench reads the writer's grouping; nothing else does
    start = lane.start

    def counted(done: lanes.Done, fn: Callable[..., Any], *args: Any) -> None:
        if fn is writer.run_batch:
            sizes.append(len(args[0]))
        start(done, fn, *args)

    lane.start = counted  # type: ignore[method-assign]
    return sizes


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench transitions")
    parser.add_argument(
        "--count", type=int, default=500, help="transitions per round and measurement"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--callers", type=int, default=64)
    args = common.parse(parser, argv, count=50, rounds=1, callers=8)
    seq, con, plain, grouped, group_sizes, in_writer = [], [], [], [], [], []
    handoff: list[float] = []
    #: Each round's ratios, side by side in time (see the module docstring).
    paired: dict[str, list[float]] = {"ratio": [], "concurrent": [], "ui": [], "grouped_ui": []}
    n = args.count
    with tempfile.TemporaryDirectory() as tmp:
        config = db.StoreConfig(data_dir=Path(tmp) / "data")
        # Rounds alternate store and plain sqlite3, so both meet the same disk weather;
        # each side's median and the median of the rounds' ratios are reported.
        for round_no in range(args.rounds + 1):
            store = await db.open(config)
            try:
                ids = await create_items(store, n * 9, f"r{round_no}")
                await store.checkpoint("TRUNCATE")
                seq_rate, writer_s = await sequential_split(store, ids[:n])
                sizes = record_groups(store)
                con_rate = await concurrent(store, ids[n : n * 3], args.callers)
            finally:
                await store.close()
            raw_rate = raw(config.db_path, ids[n * 3 : n * 4], [1] * n)
            grouped_rate = raw(config.db_path, ids[n * 4 : n * 6], sizes)
            raw_ui = raw(config.db_path, ids[n * 6 : n * 7], [1] * n, reads=False)
            grouped_ui_rate = raw(config.db_path, ids[n * 7 :], sizes, reads=False)
            if round_no:  # round 0 warms the page cache and the WAL file
                seq.append(seq_rate)
                in_writer.append(writer_s)
                handoff.append(1 / seq_rate - writer_s)
                con.append(con_rate)
                plain.append(raw_rate)
                grouped.append(grouped_rate)
                group_sizes += sizes
                paired["ratio"].append(seq_rate / raw_rate)
                paired["concurrent"].append(con_rate / grouped_rate)
                paired["ui"].append(seq_rate / raw_ui)
                paired["grouped_ui"].append(con_rate / grouped_ui_rate)
    seq_rate, con_rate, raw_rate = common.median(seq), common.median(con), common.median(plain)
    ratio = {name: round(common.median(values), 3) for name, values in paired.items()}
    common.report(
        {
            "bench": "transitions",
            "synchronous": "FULL",
            "rounds": args.rounds,
            "transitions_per_s": round(seq_rate),
            "raw_per_s": round(raw_rate),
            "ratio": ratio["ratio"],
            "one_caller_us": round(1e6 / seq_rate),
            "one_caller_in_writer_us": round(1e6 * common.median(in_writer)),
            "one_caller_handoff_us": round(1e6 * common.median(handoff)),
            "raw_us": round(1e6 / raw_rate),
            "concurrent_callers": args.callers,
            "concurrent_per_s": round(con_rate),
            "mean_group": round(sum(group_sizes) / len(group_sizes), 1),
            "raw_grouped_per_s": round(common.median(grouped)),
            "concurrent_ratio": ratio["concurrent"],
            "ratio_update_insert": ratio["ui"],
            "concurrent_ratio_update_insert": ratio["grouped_ui"],
        }
    )
