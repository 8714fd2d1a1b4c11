"""PostgreSQL's write lanes (store.backends.pg_writers): units that wait share a transaction, each
caller hears its own outcome, a unit that loses a deadlock runs again without its
batch, an operator's write does not queue behind a tick's batches, and statements run
often are prepared unless that is turned off, and a unit that must take a lock other
processes queue on runs in a transaction of its own."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from store import backend, db, errors
from store.backends import pg_conn
from tests import pg_databases

#: The server refusing a statement as the loser of a deadlock (SQLSTATE 40P01).
LOSE_A_DEADLOCK = (
    "DO $$ BEGIN RAISE EXCEPTION 'lost a deadlock' USING ERRCODE = 'deadlock_detected'; END $$"
)


def config(server: pg_databases.Server, tmp_path: Path, **kw: Any) -> db.StoreConfig:
    server.empty_tables()
    return db.StoreConfig(data_dir=tmp_path, database_url=server.run_url, **kw)


@pytest.fixture
async def store(pg_run_database: pg_databases.Server, tmp_path: Path) -> AsyncIterator[db.Store]:
    opened = await db.open(config(pg_run_database, tmp_path))
    await opened.write(lambda conn: conn.execute("DROP TABLE IF EXISTS lane_t"))
    await opened.write(lambda conn: conn.execute("CREATE TABLE lane_t (x INTEGER)"))
    try:
        yield opened
    finally:
        await opened.write(lambda conn: conn.execute("DROP TABLE lane_t"))
        await opened.close()


def inserting(value: int, *, fail: bool = False) -> Callable[[backend.Conn], int]:
    """Insert `value`; return the transaction's id (or fail after the insert)."""

    def unit(conn: backend.Conn) -> int:
        conn.execute("INSERT INTO lane_t VALUES (?)", (value,))
        if fail:
            raise ValueError(f"unit {value} fails")
        return int(conn.execute("SELECT txid_current()").fetchone()[0])

    return unit


async def values(store: db.Store) -> list[int]:
    return await store.read(lambda c: [r[0] for r in c.execute("SELECT x FROM lane_t ORDER BY x")])


async def test_units_that_wait_share_a_transaction_and_each_caller_hears_its_own(
    store: db.Store,
) -> None:
    async def told(value: int) -> int | str:
        try:
            return await store.write(inserting(value, fail=value % 10 == 3))
        except ValueError as exc:
            return str(exc)

    outcomes = await asyncio.gather(*(told(n) for n in range(40)))
    failed = [o for o in outcomes if isinstance(o, str)]
    assert failed == [f"unit {n} fails" for n in (3, 13, 23, 33)]
    transactions = {o for o in outcomes if isinstance(o, int)}
    # 36 commits would be one per unit; the waiting units went in a few batches, on
    # more than one lane at once.
    assert 2 <= len(transactions) <= 12, transactions
    assert await values(store) == [n for n in range(40) if n % 10 != 3]


async def test_a_unit_that_loses_a_deadlock_runs_again_and_its_batch_commits(
    store: db.Store, caplog: pytest.LogCaptureFixture
) -> None:
    """It loses in the batch's first pass (the batch runs again, each unit in a
    savepoint) and again in its savepoint: the others commit, and it runs a third
    time, on its own."""
    runs = 0

    def losing_twice(conn: backend.Conn) -> str:
        nonlocal runs
        runs += 1
        conn.execute("INSERT INTO lane_t VALUES (100)")
        if runs <= 2:
            conn.execute(LOSE_A_DEADLOCK)
        return "done"

    with caplog.at_level("INFO", logger="store.backends.pg_writers"):
        outcomes = await asyncio.gather(
            *(store.write(inserting(n)) for n in range(10)),
            store.write(losing_twice),
            *(store.write(inserting(n)) for n in range(10, 20)),
        )
    assert outcomes[10] == "done" and runs == 3
    assert await values(store) == [*range(20), 100]
    assert "a write lost a 40P01; running it again" in caplog.messages


async def test_a_unit_that_keeps_losing_deadlocks_is_told_so(store: db.Store) -> None:
    def always_losing(conn: backend.Conn) -> None:
        conn.execute(LOSE_A_DEADLOCK)

    with pytest.raises(errors.StoreError) as lost:
        await store.write(always_losing)
    assert lost.value.sqlstate == "40P01"
    assert await store.write(inserting(1)) > 0  # the lanes go on


async def test_a_unit_that_asks_to_run_alone_runs_in_a_transaction_of_its_own(
    store: db.Store,
) -> None:
    """It raises RunAlone while it shares a batch: nothing of it is written there, the
    others commit, and it runs again alone; its caller never hears of it."""
    shared_runs = 0

    def alone(conn: backend.Conn) -> int:
        nonlocal shared_runs
        if backend.shares_transaction(conn):
            shared_runs += 1
            raise errors.RunAlone("takes a lock other workers queue on")
        return inserting(100)(conn)

    units = [inserting(n) for n in range(10)] + [alone] + [inserting(n) for n in range(10, 20)]
    outcomes = await asyncio.gather(*(store.write(unit) for unit in units))
    its_own = outcomes.pop(10)
    assert shared_runs > 0  # it was batched first
    assert its_own not in outcomes
    assert len(set(outcomes)) < len(outcomes)  # the others still shared transactions
    assert await values(store) == [*range(20), 100]


async def test_begin_rides_with_the_first_statement_and_an_empty_transaction_sends_nothing(
    store: db.Store,
) -> None:
    """BEGIN's result is never read: it shares the first statement's round trip. A unit
    that sends no statement costs no round trip at all; a read opening a snapshot of its
    own costs one for BEGIN and its first statement."""
    trips, sent = pg_conn.round_trips(), pg_conn.statements_sent()
    assert await store.write(inserting(7)) > 0
    # BEGIN with the INSERT, then the SELECT, then COMMIT.
    assert (pg_conn.round_trips() - trips, pg_conn.statements_sent() - sent) == (3, 4)
    trips, sent = pg_conn.round_trips(), pg_conn.statements_sent()
    await store.write(lambda conn: None)
    assert (pg_conn.round_trips() - trips, pg_conn.statements_sent() - sent) == (0, 0)

    def snapshot(conn: backend.Conn) -> list[int]:
        conn.execute("BEGIN")
        try:
            return [row[0] for row in conn.execute("SELECT x FROM lane_t")]
        finally:
            conn.execute("COMMIT")

    trips = pg_conn.round_trips()
    assert await store.read(snapshot) == [7]
    assert pg_conn.round_trips() - trips == 2


async def test_a_failing_first_statement_is_told_and_rolled_back_with_its_begin(
    store: db.Store,
) -> None:
    def failing(conn: backend.Conn) -> None:
        conn.execute("INSERT INTO lane_t VALUES (CAST('not a number' AS INTEGER))")

    with pytest.raises(errors.StoreError, match="not a number"):
        await store.write(failing)
    assert await store.write(inserting(8)) > 0
    assert await values(store) == [8]


async def test_an_operators_write_does_not_wait_for_a_ticks_batches(
    pg_run_database: pg_databases.Server, tmp_path: Path
) -> None:
    """Two lanes: the tick's twelve slow units take one, the tap takes the other."""
    store = await db.open(dataclasses.replace(config(pg_run_database, tmp_path), writers=2))
    finished: list[str] = []

    def slow(conn: backend.Conn) -> None:
        conn.execute("SELECT pg_sleep(0.05)")

    async def write(name: str, unit: Callable[[backend.Conn], Any]) -> None:
        await store.write(unit)
        finished.append(name)

    try:
        background = [asyncio.create_task(write(f"tick {n}", slow)) for n in range(12)]
        await asyncio.sleep(0.02)  # the tick's units are on their lane
        with db.foreground():
            await write("tap", lambda conn: conn.execute("SELECT 1"))
        await asyncio.gather(*background)
    finally:
        await store.close()
    assert finished[0] == "tap", finished


@pytest.mark.parametrize("prepared", [True, False])
async def test_statements_run_often_are_prepared_unless_turned_off(
    pg_run_database: pg_databases.Server, tmp_path: Path, prepared: bool
) -> None:
    cfg = dataclasses.replace(config(pg_run_database, tmp_path), prepared_statements=prepared)
    store = await db.open(cfg)

    def repeat_then_count(conn: backend.Conn) -> int:
        for n in range(10):
            conn.execute("SELECT ? + 1", (n,))
        return int(conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0])

    try:
        assert (await store.write(repeat_then_count) > 0) is prepared
    finally:
        await store.close()


async def test_units_still_queued_when_the_store_closes_are_told_so(
    pg_run_database: pg_databases.Server, tmp_path: Path
) -> None:
    """The batch on its lane finishes; what never reached a lane raises Closed."""
    store = await db.open(dataclasses.replace(config(pg_run_database, tmp_path), writers=1))

    def slow(conn: backend.Conn) -> str:
        conn.execute("SELECT pg_sleep(0.2)")
        return "done"

    running = asyncio.create_task(store.write(slow))
    await asyncio.sleep(0.05)  # on the one lane
    queued = [asyncio.create_task(store.write(slow)) for _ in range(3)]
    await asyncio.sleep(0)
    await store.close()
    assert await running == "done"
    for task in queued:
        with pytest.raises(errors.Closed):
            await task
