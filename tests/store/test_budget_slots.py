"""Budgets shared by several PostgreSQL workers: each holds and settles in a slot of its
own (store/ledger/slots.py), and the budget is never overspent by a micro-dollar, when
they race for its last micros, when one is paused inside a transaction, and when one is
killed holding room its slot was granted.

Each worker is a store of its own on one database (its own lanes and connections), as
`gatehouse run` processes are; the killed one is a real process, SIGKILLed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from store import backend, clock, db, errors, ledger
from store.backends import migrate
from store.ledger import budgets, claims, slots
from store.ledger import settle as ledger_settle
from store.ledger.machine import ClaimState
from store.ledger.prices import Usage
from tests import pg_databases
from tests.store.test_ledger_trail import alert_rows

#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 30.0
ENDPOINT = "drafts.create"
LEASE = timedelta(minutes=10)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def url(pg_run_database: pg_databases.Server) -> str:
    pg_run_database.empty_tables()
    return pg_run_database.run_url


@pytest.fixture
async def workers(url: str, tmp_path: Path) -> AsyncIterator[Callable[[int], Any]]:
    """Open `n` more workers on the database, each with `writers` lanes (closed after
    the test)."""
    opened: list[db.Store] = []

    async def open_workers(n: int, writers: int = 4) -> list[db.Store]:
        for _ in range(n):
            config = db.StoreConfig(data_dir=tmp_path / f"w{len(opened)}", database_url=url)
            opened.append(await db.open(dataclasses.replace(config, writers=writers)))
        return opened[-n:]

    try:
        yield open_workers
    finally:
        for store in opened:
            await store.close()


def _now() -> datetime:
    return datetime.now(UTC)


async def _begin(store: db.Store, key: str, worst: int, now: datetime) -> claims.Work:
    return await ledger.begin(
        store, ledger.Call(key, ENDPOINT, {"k": key}, worst, "news", None, LEASE), now
    )


async def _spend(store: db.Store, key: str, worst: int, actual: int, now: datetime) -> None:
    work = await _begin(store, key, worst, now)
    await ledger.start_provider(store, work.id, now)
    await ledger.complete(
        store, work.id, ledger.Actual(actual, f"req-{key}", Usage(1, 1)), None, now
    )


def _claims_total(conn: backend.Conn) -> tuple[int, int]:
    """What the claims themselves say was spent and is held (the ledger's own truth)."""
    row = conn.execute(
        "SELECT CAST(coalesce(sum(actual_micros), 0) AS BIGINT),"
        " CAST(coalesce(sum(CASE WHEN state IN ('reserved', 'started', 'uncertain')"
        "  THEN reserved_micros END), 0) AS BIGINT) FROM claims"
    ).fetchone()
    return int(row[0]), int(row[1])


def _escrow(conn: backend.Conn) -> list[tuple[int, int, int]]:
    """Per budget row: its limit, what it granted, and what its slots were granted."""
    rows = conn.execute(
        "SELECT b.limit_micros, b.granted_micros,"
        " CAST((SELECT coalesce(sum(s.granted_micros), 0) FROM budget_slots s"
        "  WHERE s.scope = b.scope AND s.period = b.period"
        "  AND s.period_start = b.period_start) AS BIGINT) FROM budgets b"
    ).fetchall()
    return [(int(a), int(b), int(c)) for a, b, c in rows]


async def test_four_workers_racing_a_small_budget_never_overspend_it(
    workers: Callable[[int], Any],
) -> None:
    """Many holds at once near the limit, settled at random figures or released, from
    four workers with four lanes each: the spend never passes the limit, the reports
    agree with the claims, and the room left in every slot can still be spent."""
    stores: list[db.Store] = await workers(4)
    now = _now()
    await ledger.set_budget(stores[0], ledger.Limit("global", "day", 20_000), "cli", now)
    await ledger.set_budget(stores[0], ledger.Limit("news", "day", 15_000), "cli", now)
    seed = random.Random(45)
    refused = 0

    async def one(store: db.Store, key: str, worst: int, actual: int | None) -> None:
        nonlocal refused
        try:
            work = await _begin(store, key, worst, now)
        except errors.BudgetExceeded:
            refused += 1
            return
        if actual is None:  # failed before the call: the hold goes back
            await ledger.fail(store, work.id, "no call", now)
            return
        await ledger.start_provider(store, work.id, now)
        await ledger.complete(
            store, work.id, ledger.Actual(actual, f"req-{key}", Usage(1, 1)), None, now
        )

    jobs = []
    for n in range(240):
        worst = seed.randrange(50, 700)
        actual = None if seed.random() < 0.2 else seed.randrange(0, worst + 1)
        jobs.append(one(stores[n % 4], f"k{n}", worst, actual))
    await asyncio.wait_for(asyncio.gather(*jobs), WITHIN_S)

    report = await ledger.report(stores[0], now)
    spent, held = await stores[0].read(_claims_total)
    assert refused > 0  # the race did reach the limit
    by_scope = {b.scope: b for b in report.budgets}
    assert held == 0 and all(b.held_micros == 0 for b in report.budgets)
    assert by_scope["news"].spent_micros == by_scope["global"].spent_micros == spent
    assert spent <= 15_000
    for limit, granted, slots_granted in await stores[0].read(_escrow):
        assert slots_granted == granted <= limit
    # Whatever room the race left in the four workers' slots, a fifth worker spends it all.
    [fifth] = await workers(1)
    left = 15_000 - spent
    await _spend(fifth, "last", left, left, now)
    with pytest.raises(errors.BudgetExceeded):
        await _begin(fifth, "past-the-limit", 1, now)
    assert [b.spent_micros for b in (await ledger.report(fifth, now)).budgets] == [
        spent + left,
        15_000,
    ]


async def test_a_worker_paused_inside_a_transaction_holds_up_no_other(
    workers: Callable[[int], Any],
) -> None:
    """A worker stopped (SIGSTOP, a VM stall) while its transaction holds in its slot:
    the others hold and settle on, where one row per budget made them all wait."""
    # One lane: the paused transaction is on the connection whose slot was granted room.
    [paused] = await workers(1, writers=1)
    [other] = await workers(1)
    now = _now()
    await ledger.set_budget(paused, ledger.Limit("global", "day", 1_000_000), "cli", now)
    await _spend(paused, "before", 1_000, 900, now)  # its slot was granted room
    inside, resume = threading.Event(), threading.Event()

    def holding_then_stopped(conn: backend.Conn) -> claims.Work:
        work = claims.begin_sync(
            conn, claims.Call("paused", ENDPOINT, {}, 1_000, "news", None, LEASE), now
        )
        inside.set()
        resume.wait(WITHIN_S)  # the transaction stays open, its slot row locked
        return work

    stopped = asyncio.ensure_future(paused.write(holding_then_stopped))
    try:
        assert await asyncio.to_thread(inside.wait, WITHIN_S)
        for n in range(20):
            await asyncio.wait_for(_spend(other, f"other-{n}", 1_000, 700, now), WITHIN_S)
    finally:
        resume.set()
        await stopped
    [row] = (await ledger.report(other, now)).budgets
    assert (row.spent_micros, row.held_micros) == (900 + 20 * 700, 1_000)


async def test_a_grant_locks_the_budget_row_for_its_own_transaction_not_a_batch(
    workers: Callable[[int], Any], url: str
) -> None:
    """A first hold, which grants its slot room under the budget row's lock, queued with
    a slow unit: the batch's other units run while nobody else could grant if the lock
    were held until the batch commits. Another worker may lock the row meanwhile."""
    [worker] = await workers(1, writers=2)  # one lane for background units: one batch
    now = _now()
    await ledger.set_budget(worker, ledger.Limit("global", "day", 1_000_000), "cli", now)
    inside, probed = threading.Event(), threading.Event()

    def slow(conn: backend.Conn) -> None:
        if backend.shares_transaction(conn):  # the unit beside the grant, in its batch
            inside.set()
            probed.wait(WITHIN_S)

    def row_free() -> bool:
        with psycopg.connect(url, autocommit=True) as other:
            try:
                other.execute("SELECT 1 FROM budgets FOR NO KEY UPDATE NOWAIT")
                return True
            except psycopg.errors.LockNotAvailable:
                return False
            finally:
                probed.set()

    begun = asyncio.gather(_begin(worker, "first", 1_000, now), worker.write(slow))
    assert await asyncio.to_thread(inside.wait, WITHIN_S)
    assert await asyncio.to_thread(row_free)
    work, _ = await asyncio.wait_for(begun, WITHIN_S)
    assert work.state == ClaimState.RESERVED
    [row] = (await ledger.report(worker, now)).budgets
    assert row.held_micros == 1_000


async def test_a_threshold_two_settlements_passed_together_is_alerted_by_the_sweep(
    workers: Callable[[int], Any],
) -> None:
    """Two workers settle 300 of 1,000 at once, each seeing only its own 300 (the other's
    is not committed yet): neither alerts 50 %, and the claim sweep does, once."""
    a, b = await workers(2)
    now = _now()
    await ledger.set_budget(a, ledger.Limit("global", "day", 1_000), "cli", now)
    first, second = await _begin(a, "a", 300, now), await _begin(b, "b", 300, now)
    for store, work in ((a, first), (b, second)):
        await ledger.start_provider(store, work.id, now)
    inside, resume = threading.Event(), threading.Event()

    def settling_then_stopped(conn: backend.Conn) -> ledger_settle.Settlement:
        settled = ledger_settle.complete_sync(
            conn, first.id, ledger_settle.Actual(300, "req-a", Usage(1, 1)), None, now
        )
        inside.set()
        resume.wait(WITHIN_S)  # not committed while the other settles
        return settled

    stopped = asyncio.ensure_future(a.write(settling_then_stopped))
    try:
        assert await asyncio.to_thread(inside.wait, WITHIN_S)
        settling = ledger.complete(
            b, second.id, ledger.Actual(300, "req-b", Usage(1, 1)), None, now
        )
        await asyncio.wait_for(settling, WITHIN_S)
    finally:
        resume.set()
        await stopped
    [row] = (await ledger.report(b, now)).budgets
    assert row.spent_micros == 600 and await alert_rows(b) == []
    for _ in range(2):
        await ledger.recover(b, now)
        assert [p["facts"]["pct"] for _, _, p in await alert_rows(b)] == [50]


CHILD = """
import asyncio, sys, time
from datetime import datetime, timedelta, UTC
from store import db, ledger
from store.ledger.prices import Usage

async def main():
    store = await db.open(db.StoreConfig(data_dir=sys.argv[1], database_url=sys.argv[2]))
    now = datetime.fromisoformat(sys.argv[3])
    lease = timedelta(seconds=int(sys.argv[4]))
    spent = ledger.Call("spent", "drafts.create", {}, 4_000, "news", None, lease)
    work = await ledger.begin(store, spent, now)
    await ledger.start_provider(store, work.id, now)
    await ledger.complete(store, work.id, ledger.Actual(1_000, "req-spent", Usage(1, 1)), None, now)
    held = ledger.Call("open", "drafts.create", {}, 500, "news", None, lease)
    work = await ledger.begin(store, held, now)
    await ledger.start_provider(store, work.id, now)
    print("holding", flush=True)
    time.sleep(600)

asyncio.run(main())
"""


async def test_a_killed_workers_room_goes_back_to_the_others_and_its_spend_stays(
    workers: Callable[[int], Any], url: str, tmp_path: Path
) -> None:
    """A worker SIGKILLed with 2,500 micros of room unused in its slot and a call in
    flight: a living worker spends that room; the dead one's settled 1,000 stays spent,
    and its open hold stays held until the takeover settles it with evidence."""
    [alive] = await workers(1)
    now = _now()
    await ledger.set_budget(alive, ledger.Limit("global", "day", 10_000), "cli", now)
    args = [str(tmp_path / "dead"), url, now.isoformat(), "60"]
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, *args, cwd=REPO, stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), WITHIN_S)
        assert line.strip() == b"holding"
    finally:
        child.kill()  # SIGKILL: no clean stop, its connections simply drop
        await child.wait()
    [row] = (await ledger.report(alive, now)).budgets
    assert (row.spent_micros, row.held_micros, row.remaining_micros) == (1_000, 500, 8_500)
    # Only 6,000 was never granted to a slot: the rest is the dead worker's unused room.
    await _spend(alive, "all-that-is-left", 8_500, 8_000, now)
    with pytest.raises(errors.BudgetExceeded):
        await _begin(alive, "one-more", 501, now)
    # The takeover: the dead worker's call is past its lease, uncertain, then settled.
    [recovered] = await ledger.recover(alive, now + timedelta(seconds=61))
    assert recovered.state == "uncertain"
    await ledger.reconcile(alive, recovered.id, ledger.Actual(200, "invoice line 7"), "cli", now)
    [row] = (await ledger.report(alive, now)).budgets
    assert (row.spent_micros, row.held_micros) == (1_000 + 8_000 + 200, 0)
    await _spend(alive, "the-rest", 800, 800, now)
    [row] = (await ledger.report(alive, now)).budgets
    assert row.spent_micros == row.limit_micros == 10_000


def test_migrating_keeps_what_each_budget_spent_and_holds(tmp_path: Path) -> None:
    """A store from before the slots (0018): each budget's spent and held move to one slot
    granted exactly that, the thresholds already crossed are remembered, and what is left
    can still be held, to the micro."""
    earlier = tmp_path / "migrations"
    earlier.mkdir()
    for migration in migrate.discover()[:18]:
        shutil.copy(migration.path, earlier / migration.path.name)
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    conn.row_factory = sqlite3.Row
    migrate.apply_pending(conn, earlier)
    now = datetime(2026, 12, 5, 12, tzinfo=UTC)
    day = clock.to_ms(budgets.period_start("day", now))
    conn.execute("INSERT INTO budget_limits VALUES ('global', 'day', 1000, 'cli', 0)")
    conn.execute("INSERT INTO budgets VALUES ('global', 'day', ?, 1000, 600, 300)", (day,))
    migrate.apply_pending(conn)
    [row] = budgets.current_sync(conn, now)
    assert (row.spent_micros, row.held_micros, row.remaining_micros) == (600, 300, 100)
    assert conn.execute("SELECT granted_micros, alerted_pct FROM budgets").fetchone()[:] == (
        900,
        50,
    )
    key = {"scope": "global", "period": "day", "period_start": day}
    conn.execute("BEGIN")
    assert not slots.hold_sync(conn, key, 101)
    assert slots.hold_sync(conn, key, 100)
    conn.execute("COMMIT")
    assert budgets.current_sync(conn, now)[0].held_micros == 400
