"""The figures behind /metrics and the charts: right, and read off index ranges only."""

from __future__ import annotations

from datetime import datetime, timedelta

from pipelines import operations
from store import db, items, units
from store.intake import runs
from store.items.machine import State
from store.reports import figures
from tests.store.test_query_plans import assert_no_full_scan, awaiting_item
from tests.store.test_query_plans import store as store  # one reader, traced


async def test_snapshot_counts_by_state_without_scanning(store: db.Store, now: datetime) -> None:
    await awaiting_item(store, now, "g1")
    await awaiting_item(store, now, "g2")
    run = await runs.start_run(store, "news", "schedule", now)
    await runs.finish_run(store, run, "ok", runs.Counts(fetched=5, new=2, drafted=2), None, now)
    await operations.set_budget(store, "global", "day", "2.50", "cli", now)
    later = now + timedelta(minutes=5)

    await assert_no_full_scan(store, lambda: figures.snapshot(store, ["news", "other"], later))
    snap = await figures.snapshot(store, ["news", "other"], later)
    assert snap.items[("news", "awaiting_approval")] == 2
    assert snap.items[("other", "awaiting_approval")] == 0
    assert sum(snap.items.values()) == 2
    assert snap.runs[("news", "ok")] == figures.RunTotals(1, 5, 2, 2, 0)
    assert snap.outbox["card"] == (2, 300.0)  # both cards queued five minutes ago
    assert all(n == 0 for n in snap.claims.values())
    assert [(b.scope, b.period, b.limit_micros) for b in snap.budgets] == [
        ("global", "day", 2_500_000)
    ]
    assert isinstance(units.usd(snap.budgets[0].spent_micros), str)


async def test_week_has_runs_per_day_and_approval_waits(store: db.Store, now: datetime) -> None:
    item = await awaiting_item(store, now)
    decided = now + timedelta(minutes=12)
    await store.write(items.transition_sync, item.id, State.APPROVED, "operator:7", decided)
    run = await runs.start_run(store, "news", "schedule", now)
    await runs.finish_run(store, run, "error", runs.Counts(), "boom", now)

    since = now - timedelta(days=7)
    await assert_no_full_scan(store, lambda: figures.week(store, since))
    week = await figures.week(store, since)
    day = int(now.timestamp() * 1000) // 86_400_000
    assert week.runs == {(day, "error"): 1}
    assert week.waits == [(day, 720.0)]
    assert (await figures.week(store, now + timedelta(days=1))).waits == []


async def test_sla_warnings_count_items_past_most_of_their_deadline(
    store: db.Store, now: datetime
) -> None:
    made = await store.write(items.create_sync, "news", "s", "g9", {"title": "T"}, now)
    assert made is not None
    await store.write(items.transition_sync, made.id, State.DRAFTING, "system", now)
    window = timedelta(minutes=10)
    await store.write(
        items.transition_sync, made.id, State.AWAITING_APPROVAL, "system", now, deadline=window
    )
    early = await figures.snapshot(store, ["news"], now + timedelta(minutes=7))
    late = await figures.snapshot(store, ["news"], now + timedelta(minutes=9))
    past = await figures.snapshot(store, ["news"], now + timedelta(minutes=11))
    assert (early.sla_warned, late.sla_warned) == ({}, {"awaiting_approval": 1})
    assert past.sla_warned == {}  # past the deadline: the sweep's business now


async def test_spend_by_day_lists_day_budgets_since_a_day(store: db.Store, now: datetime) -> None:
    await operations.set_budget(store, "global", "day", "3", "cli", now)
    await operations.set_budget(store, "global", "month", "50", "cli", now)
    days = await figures.spend_by_day(store, now - timedelta(days=30))
    assert [(d.scope, d.day.date(), d.spent_micros, d.limit_micros) for d in days] == [
        ("global", now.date(), 0, 3_000_000)
    ]
    assert await figures.spend_by_day(store, now + timedelta(days=1)) == []
