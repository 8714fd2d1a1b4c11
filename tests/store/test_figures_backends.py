"""The metrics' figures read the same on both backends (their plans are checked on
SQLite by test_figures; here their answers, PostgreSQL's overrides included)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from pipelines import operations
from store import backend, db, items
from store.intake import runs
from store.items.machine import State
from store.reports import figures
from tests.store.test_query_plans import awaiting_item


async def test_the_snapshot_and_the_week(store: db.Store, now: datetime) -> None:
    first = await awaiting_item(store, now, "g1")
    await awaiting_item(store, now, "g2")
    run = await runs.start_run(store, "news", "schedule", now)
    await runs.finish_run(store, run, "ok", runs.Counts(fetched=5, new=2, drafted=2), None, now)
    await operations.set_budget(store, "global", "day", "2.50", "cli", now)
    snap = await figures.snapshot(store, ["news"], now + timedelta(minutes=5))
    assert snap.items[("news", "awaiting_approval")] == 2
    assert snap.runs[("news", "ok")] == figures.RunTotals(1, 5, 2, 2, 0)
    assert snap.outbox["card"] == (2, 300.0)
    assert [(b.scope, b.period, b.limit_micros) for b in snap.budgets] == [
        ("global", "day", 2_500_000)
    ]
    await store.write(
        items.transition_sync, first.id, State.APPROVED, "operator:7", now + timedelta(minutes=12)
    )
    week = await figures.week(store, now - timedelta(days=7))
    day = int(now.timestamp() * 1000) // 86_400_000
    assert week.runs == {(day, "ok"): 1}
    assert week.waits == [(day, 720.0)]
    days = await figures.spend_by_day(store, now - timedelta(days=30))
    assert [(d.scope, d.day.date(), d.limit_micros) for d in days] == [
        ("global", now.date(), 2_500_000)
    ]


async def test_sla_warnings_truncate_the_warning_share_as_sqlite_does(
    store: db.Store, now: datetime
) -> None:
    made = await store.write(items.create_sync, "news", "s", "g9", {"title": "T"}, now)
    assert made is not None
    await store.write(items.transition_sync, made.id, State.DRAFTING, "system", now)
    # 0.8 of it is 160,001.6 ms: truncated to 160,001, before the 40 s lead (160,002).
    window = timedelta(milliseconds=200_002)
    await store.write(
        items.transition_sync, made.id, State.AWAITING_APPROVAL, "system", now, deadline=window
    )
    at = await figures.snapshot(store, ["news"], now + timedelta(milliseconds=160_001))
    before = await figures.snapshot(store, ["news"], now + timedelta(milliseconds=160_000))
    assert (before.sla_warned, at.sla_warned) == ({}, {"awaiting_approval": 1})


async def test_the_item_counts_follow_every_move_and_agree_with_the_items(
    store: db.Store, now: datetime
) -> None:
    """Counted by triggers, not by scanning: creation, transitions, a replay and two
    writers at once all keep the counts equal to the items' own states."""
    made = [await awaiting_item(store, now, f"g{n}") for n in range(6)]
    await store.write(items.transition_sync, made[0].id, State.APPROVED, "operator:7", now)
    await store.write(items.transition_sync, made[1].id, State.REJECTED, "operator:7", now)
    await store.write(items.replay_sync, made[1].id, "cli", now + timedelta(minutes=1), "again")
    await asyncio.gather(*(
        store.write(items.transition_sync, m.id, State.EXPIRED, "sweep", now) for m in made[2:]
    ))  # fmt: skip
    await store.write(items.create_sync, "digest", "s", "d1", {"title": "T"}, now)

    def truth(conn: backend.Conn) -> dict[tuple[str, str], int]:
        rows = conn.execute("SELECT pipeline, state, count(*) FROM items GROUP BY 1, 2")
        return {(p, s): int(n) for p, s, n in rows}

    expected = await store.read(truth)
    snap = await figures.snapshot(store, ["news", "digest"], now)
    assert {k: v for k, v in snap.items.items() if v} == expected
    assert expected[("news", "expired")] == 4 and expected[("news", "new")] == 1
