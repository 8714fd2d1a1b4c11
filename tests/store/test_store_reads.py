"""Reads that once ran as SQL outside the store, now typed rows from it (both backends)."""

from __future__ import annotations

from datetime import datetime, timedelta

from pipelines.approval import flow, rule
from store import db, items, outbox
from store.items.machine import State
from store.review.followups import Shown
from tests.store.test_item_contracts import _awaiting


async def test_approved_since_lists_a_pipelines_recent_approved_drafts(
    store: db.Store, now: datetime
) -> None:
    # The kept one first: on a fresh store it is item 1, which nothing may leave out.
    kept = await _awaiting(store, now, "kept")
    await store.write(flow.decide_sync, rule.Vote(Shown(kept.id, 1, 1), 7, "approve"), now)
    old = await _awaiting(store, now - timedelta(days=9), "old")
    await store.write(
        flow.decide_sync, rule.Vote(Shown(old.id, 1, 1), 7, "approve"), now - timedelta(days=9)
    )
    waiting = await _awaiting(store, now, "waiting")
    assert waiting.state == State.AWAITING_APPROVAL

    found = await items.approved_since(store, "news", now - timedelta(days=7), limit=10)
    assert found == [items.Approved(kept.id, "kept", "draft text")]
    assert await items.approved_since(store, "other", now - timedelta(days=30), limit=10) == []
    everything = await items.approved_since(store, "news", now - timedelta(days=30), limit=1)
    assert [a.item_id for a in everything] == [old.id]  # the last recorded first, within the limit


async def test_dispatches_lists_sent_and_pending_dispatch_rows_only(
    store: db.Store, now: datetime
) -> None:
    payload = {"item_id": 1, "attempt": 1, "version": 1}
    first = await outbox.enqueue(store, "dispatch", "news", payload, now, dedupe_key="d1")
    second = await outbox.enqueue(store, "dispatch", "news", payload, now, dedupe_key="d2")
    parked = await outbox.enqueue(store, "dispatch", "news", payload, now, dedupe_key="d3")
    await outbox.enqueue(store, "alert", outbox.ALERTS, {"text": "hi"}, now)
    assert first and second and parked
    await outbox.mark_sent(store, first, "ext-1", now)
    await outbox.mark_failed(store, parked, "gone")

    rows = await outbox.dispatches(store)
    assert [(r.id, r.state, r.target, r.payload) for r in rows] == [
        (first, "sent", "news", payload),
        (second, "pending", "news", payload),
    ]
