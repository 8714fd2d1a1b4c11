"""Workers are woken by committed outbox rows (store.on_commit), never by rolled-back ones."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from store import db, outbox


# On PostgreSQL this process hears its own commits once more through the store's
# listener, a moment later: a wake-up there is at least once, never exactly once (an
# extra one costs a worker one look). tests/store/test_outbox_across_workers.py shows
# another worker's commit waking this one, and a rollback waking nobody.
@pytest.mark.sqlite_only
async def test_a_committed_row_wakes_the_workers_of_its_kind_only(
    store: db.Store, now: datetime
) -> None:
    alerts = outbox.wakeup(store, ["alert"])
    dispatches = outbox.wakeup(store, ["dispatch"])
    await outbox.enqueue(store, "alert", outbox.ALERTS, {"text": "x"}, now, dedupe_key="k")
    assert alerts.is_set() and not dispatches.is_set()
    alerts.clear()
    # The same key again inserts nothing: nobody is woken.
    again = await outbox.enqueue(store, "alert", outbox.ALERTS, {"text": "x"}, now, dedupe_key="k")
    assert again is None
    assert not alerts.is_set()


async def test_a_rolled_back_row_wakes_nobody(store: db.Store, now: datetime) -> None:
    woken = outbox.wakeup(store, ["alert"])

    def unit(conn: sqlite3.Connection) -> None:
        outbox.enqueue_sync(conn, "alert", outbox.ALERTS, {"text": "lost"}, now)
        raise ValueError("the unit fails after queueing")

    with pytest.raises(ValueError, match="the unit fails"):
        await store.write(unit)
    assert not woken.is_set()
    assert await outbox.due(store, now, ["alert"]) == []


async def test_a_row_in_another_store_does_not_wake_this_one(
    store: db.Store, tmp_path: Path, now: datetime
) -> None:
    woken = outbox.wakeup(store, ["alert"])
    other = await db.open(db.StoreConfig(data_dir=tmp_path / "other"))
    try:
        await outbox.enqueue(other, "alert", outbox.ALERTS, {"text": "elsewhere"}, now)
    finally:
        await other.close()
    assert not woken.is_set()


async def test_next_due_is_the_earliest_pending_row_of_the_kinds(
    store: db.Store, now: datetime
) -> None:
    assert await outbox.next_due(store, ["alert"]) is None
    first = await outbox.enqueue(store, "alert", outbox.ALERTS, {"text": "a"}, now)
    assert first is not None
    await outbox.defer(store, first, "later", now + timedelta(minutes=5))
    await outbox.enqueue(store, "dispatch", "news", {"item_id": 1}, now)
    assert await outbox.next_due(store, ["alert"]) == now + timedelta(minutes=5)
    assert await outbox.next_due(store, ["dispatch"]) == now
    row = await store.read(outbox.get_sync, first)
    assert (row.attempts, row.last_error) == (0, "later")  # a deferral is not an attempt
