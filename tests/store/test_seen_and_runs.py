"""Dedup memory and the run log against a real database file."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta, timezone

import pytest

from store import clock, db, errors
from store.intake import runs, seen
from store.upkeep import startup
from tests import snapshot


async def test_filter_unseen_keeps_order_beyond_the_variable_limit(
    store: db.Store, now: datetime
) -> None:
    # More ids than SQLite's default variable limit (32766) and many chunks.
    ids = [f"id-{i:06d}" for i in range(40_000)]
    ids.reverse()  # not sorted: order must come from the input
    already = ids[::3]
    assert await store.write(seen.mark_seen_sync, "p", "feed", already, now) == already
    unseen = await store.read(seen.filter_unseen_sync, "p", "feed", ids)
    skipped = set(already)
    assert unseen == [i for i in ids if i not in skipped]


async def test_filter_unseen_collapses_repeats_and_scopes_are_separate(
    store: db.Store, now: datetime
) -> None:
    await store.write(seen.mark_seen_sync, "p", "mail", ["a"], now)
    assert await store.read(seen.filter_unseen_sync, "p", "feed", ["b", "a", "b", "c", "a"]) == [
        "b",
        "a",
        "c",
    ]
    assert await store.read(seen.filter_unseen_sync, "p", "mail", ["b", "a"]) == ["b"]
    assert await store.read(seen.filter_unseen_sync, "other", "mail", ["a"]) == ["a"]


async def test_mark_seen_returns_only_new_ids_in_order(store: db.Store, now: datetime) -> None:
    assert await store.write(seen.mark_seen_sync, "p", "s", ["x", "y"], now) == ["x", "y"]
    assert await store.write(seen.mark_seen_sync, "p", "s", ["z", "x", "w", "z"], now) == ["z", "w"]
    assert await store.read(seen.filter_unseen_sync, "p", "s", ["w", "x", "y", "z", "v"]) == ["v"]


async def test_sweep_deletes_only_old_rows(
    store: db.Store, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seen, "SWEEP_BATCH", 7)  # several batches per scope
    old = [f"old-{i}" for i in range(20)]
    await store.write(seen.mark_seen_sync, "p", "a", old, now - timedelta(days=100))
    await store.write(seen.mark_seen_sync, "p", "b", old[:5], now - timedelta(days=100))
    await store.write(seen.mark_seen_sync, "p", "a", ["fresh"], now - timedelta(days=10))
    progress: list[tuple[str, str, int]] = []
    deleted = await seen.sweep(store, now, progress=lambda *step: progress.append(step))
    assert deleted == 25
    assert progress[-1] == ("p", "b", 25)
    assert await store.read(seen.filter_unseen_sync, "p", "a", ["fresh", "old-1"]) == ["old-1"]


@pytest.mark.parametrize(
    "bad",
    [
        datetime(2026, 1, 1),  # naive
        datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 30, tzinfo=timezone(timedelta(hours=-1))),  # past the end in UTC
        datetime(1970, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1))),  # before the start in UTC
    ],
)
async def test_out_of_range_timestamps_are_rejected_and_nothing_is_written(
    store: db.Store, bad: datetime
) -> None:
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.TimestampOutOfRange):
        await store.write(seen.mark_seen_sync, "p", "s", ["x"], bad)
    assert await snapshot.tables(store) == unchanged
    with pytest.raises(errors.TimestampOutOfRange):
        await runs.start_run(store, "p", "schedule", bad)

    def count(conn: sqlite3.Connection) -> tuple[int, int]:
        return (
            conn.execute("SELECT count(*) FROM seen_items").fetchone()[0],
            conn.execute("SELECT count(*) FROM pipeline_runs").fetchone()[0],
        )

    assert await store.read(count) == (0, 0)


async def test_bad_time_midway_rolls_back_the_whole_unit(store: db.Store, now: datetime) -> None:
    run_id = await runs.start_run(store, "p", "schedule", now)

    def unit(conn: sqlite3.Connection) -> None:
        seen.mark_seen_sync(conn, "p", "s", ["a", "b"], now)
        runs.finish_run_sync(
            conn,
            run_id,
            "ok",
            runs.Counts(2, 2),
            None,
            datetime(10000 - 1, 12, 31, 23, tzinfo=timezone(timedelta(hours=-2))),
        )

    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.TimestampOutOfRange):
        await store.write(unit)
    assert await snapshot.tables(store) == unchanged
    assert await store.read(seen.filter_unseen_sync, "p", "s", ["a", "b"]) == ["a", "b"]
    assert (await store.read(runs.get_sync, run_id)).status == "running"


def test_clock_round_trips_milliseconds() -> None:
    moment = datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=UTC)
    assert clock.from_ms(clock.to_ms(moment)) == moment
    assert clock.to_ms(datetime(1970, 1, 1, tzinfo=UTC)) == 0
    assert (
        clock.from_ms(clock.to_ms(datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC))).year
        == 9999
    )


async def test_runs_newest_first_with_counts(store: db.Store, now: datetime) -> None:
    ids = []
    for minute in range(3):
        at = now + timedelta(minutes=minute)
        run_id = await runs.start_run(store, "news", "schedule", at)
        await runs.finish_run(store, run_id, "ok", runs.Counts(fetched=minute, new=1), None, at)
        ids.append(run_id)
    await runs.start_run(store, "other", "manual", now)
    recent = await runs.recent_runs(store, "news", 2)
    assert [r.id for r in recent] == [ids[2], ids[1]]
    assert recent[0].counts == runs.Counts(fetched=2, new=1)
    assert recent[0].ended_at == now + timedelta(minutes=2)


async def test_finishing_twice_is_a_conflict(store: db.Store, now: datetime) -> None:
    run_id = await runs.start_run(store, "news", "schedule", now)
    await runs.finish_run(store, run_id, "ok", runs.Counts(), None, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.Conflict):
        await runs.finish_run(store, run_id, "error", runs.Counts(), "late", now)
    assert await snapshot.tables(store) == unchanged


async def test_investigation_window(store: db.Store, now: datetime) -> None:
    outcomes = ["ok", "error", "ok", "ok", "error", "error"]
    ids = []
    for minute, status in enumerate(outcomes):
        at = now + timedelta(minutes=minute)
        run_id = await runs.start_run(store, "news", "schedule", at)
        await runs.finish_run(
            store, run_id, status, runs.Counts(), "boom" if status == "error" else None, at
        )  # type: ignore[arg-type]
        ids.append(run_id)
    window = await runs.investigation_window(store, "news")
    assert window.last_ok is not None and window.last_ok.id == ids[3]
    assert window.first_error_after is not None and window.first_error_after.id == ids[4]
    empty = await runs.investigation_window(store, "nothing")
    assert empty.last_ok is None and empty.first_error_after is None


async def test_runs_left_running_by_a_crash_become_interrupted(
    store_config: db.StoreConfig, now: datetime
) -> None:
    first = await db.open(store_config)
    crashed = await runs.start_run(first, "news", "schedule", now)
    finished = await runs.start_run(first, "digest", "schedule", now)
    await runs.finish_run(first, finished, "ok", runs.Counts(), None, now)
    await first.close()  # the process "dies" with a run still open

    second = await db.open(store_config)
    try:
        await startup.recover(second, now + timedelta(minutes=5))
        run = await second.read(runs.get_sync, crashed)
        assert (run.status, run.error_text, run.ended_at) == (
            "error",
            "interrupted",
            now + timedelta(minutes=5),
        )
        assert (await second.read(runs.get_sync, finished)).status == "ok"
    finally:
        await second.close()


async def test_unknown_trigger_is_refused(store: db.Store, now: datetime) -> None:
    unchanged = await snapshot.tables(store)
    with pytest.raises(ValueError, match="valid: schedule, manual, replay"):
        await runs.start_run(store, "news", "cron", now)  # type: ignore[arg-type]
    assert await snapshot.tables(store) == unchanged
