"""What each caller of the single writer is told: a unit that fails raises to its own
caller, a commit that fails raises to every caller in it, and a unit that must not run
inside a transaction (a held checkpoint) never shares one, in the foreground too.

`gather(..., return_exceptions=True)` cannot tell a raised error from one handed back
as a result; `outcome` can, and a caller handed an error as its result would go on as
if its write had landed."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable

import pytest

from store import db, errors
from tests.store.test_store_core import _values

pytestmark = pytest.mark.sqlite_only  # the single writer's batches

Unit = Callable[[sqlite3.Connection], object]


async def outcome(write: Awaitable[object]) -> str:
    try:
        result = await write
    except Exception as exc:
        return f"raised {type(exc).__name__}: {exc}"
    return f"returned {result!r}"


def _inserting(value: int, *, fail: bool = False) -> Unit:
    def unit(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t VALUES (?)", (value,))
        if fail:
            raise ValueError(f"unit {value} fails")
        return value

    return unit


@pytest.fixture
async def table(store: db.Store) -> db.Store:
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    return store


@pytest.mark.parametrize("foreground", [False, True])
async def test_a_failing_unit_in_a_shared_commit_raises_to_its_caller_alone(
    table: db.Store, foreground: bool
) -> None:
    async def run() -> list[str]:
        writes = (table.write(_inserting(i, fail=i % 4 == 1)) for i in range(8))
        return await asyncio.gather(*(outcome(w) for w in writes))

    if foreground:
        with db.foreground():
            told = await run()
    else:
        told = await run()
    assert told == [
        f"raised ValueError: unit {i} fails" if i % 4 == 1 else f"returned {i}" for i in range(8)
    ]
    assert await _values(table) == [0, 2, 3, 4, 6, 7]


async def test_a_commit_that_fails_raises_to_every_caller_in_it(table: db.Store) -> None:
    """A foreign key checked at COMMIT (deferred) fails the commit itself: nothing in the
    transaction was written, so nobody in it may be told otherwise."""
    await table.write(lambda conn: conn.execute("CREATE TABLE child (p INTEGER REFERENCES t (x))"))
    await table.write(lambda conn: conn.execute("CREATE UNIQUE INDEX t_x ON t (x)"))

    def orphan(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA defer_foreign_keys=ON")
        conn.execute("INSERT INTO child VALUES (99)")

    with pytest.raises(errors.ConstraintViolation, match="FOREIGN KEY"):
        await table.write(orphan)
    told = await asyncio.gather(
        outcome(table.write(_inserting(1))),
        outcome(table.write(orphan)),
        outcome(table.write(_inserting(2))),
    )
    assert [t.split(":")[0] for t in told] == ["raised ConstraintViolation"] * 3
    assert await _values(table) == []
    assert await outcome(table.write(_inserting(3))) == "returned 3"  # the writer carries on


class Abort(BaseException):
    """Not an Exception: what a unit might raise that no `except Exception` catches."""


async def test_a_unit_that_aborts_fails_its_whole_batch_and_the_writer_goes_on(
    table: db.Store,
) -> None:
    def aborting(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (99)")
        raise Abort("stop here")

    async def told(write: Awaitable[object]) -> str:
        try:
            return await outcome(write)
        except Abort as exc:
            return f"aborted: {exc}"

    told_each = await asyncio.gather(
        told(table.write(_inserting(1))),
        told(table.write(aborting)),
        told(table.write(_inserting(2))),
    )
    assert told_each == ["aborted: stop here"] * 3
    assert await _values(table) == []
    assert await outcome(table.write(_inserting(3))) == "returned 3"


@pytest.mark.parametrize("foreground", [False, True])
async def test_units_run_in_a_transaction_and_a_held_checkpoint_outside_any(
    table: db.Store, foreground: bool
) -> None:
    """A TRUNCATE queued among writes runs between two of their transactions: inside one,
    the checkpointer's connection would find the writer's lock held and give up busy."""

    def in_transaction(conn: sqlite3.Connection) -> bool:
        conn.execute("INSERT INTO t VALUES (0)")
        return conn.in_transaction

    async def run() -> list[object]:
        return await asyncio.gather(
            *(table.write(in_transaction) for _ in range(5)),
            table.checkpoint("TRUNCATE"),
            *(table.write(in_transaction) for _ in range(5)),
        )

    if foreground:
        with db.foreground():
            results = await run()
    else:
        results = await run()
    checkpoint = results.pop(5)
    assert results == [True] * 10
    assert isinstance(checkpoint, tuple) and checkpoint[0] == 0, f"busy: {checkpoint}"
