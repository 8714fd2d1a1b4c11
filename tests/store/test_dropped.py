"""Items a pipeline dropped before drafting, on both backends: listed newest first with
their reason, counted since a moment, and no longer either once replayed."""

from __future__ import annotations

from datetime import datetime, timedelta

from store import db, items
from store.audit import events
from store.intake import dropped
from store.items.machine import State


async def _filtered(store: db.Store, pipeline: str, n: int, at: datetime) -> items.Item:
    item = await store.write(items.create_sync, pipeline, "feed", f"g{n}", {"title": f"T{n}"}, at)
    assert item is not None
    return await store.write(
        items.transition_sync, item.id, State.FILTERED, "system", at, reason=f"rule {n}"
    )


async def test_filtered_items_are_listed_and_counted(store: db.Store, now: datetime) -> None:
    yesterday = now - timedelta(days=1)
    old = await _filtered(store, "city", 1, yesterday)
    first = await _filtered(store, "city", 2, now)
    second = await _filtered(store, "city", 3, now + timedelta(minutes=1))
    await _filtered(store, "other", 4, now)
    kept = await store.write(items.create_sync, "city", "feed", "g5", {"title": "T5"}, now)
    assert kept is not None

    found = await dropped.recent(store, "city", State.FILTERED, 10)
    assert [(i.id, i.reason) for i in found] == [
        (second.id, "rule 3"), (first.id, "rule 2"), (old.id, "rule 1")
    ]  # fmt: skip
    assert [i.id for i in await dropped.recent(store, "city", State.FILTERED, 1)] == [second.id]
    midnight = now.replace(hour=0, minute=0)
    assert await dropped.count_since(store, "city", State.FILTERED, midnight) == 2

    # A replay takes it out of both: the operator overruled the filter.
    await store.write(items.replay_sync, first.id, "operator:7", now, "replayed by operator:7")
    assert await dropped.count_since(store, "city", State.FILTERED, midnight) == 1
    assert first.id not in [i.id for i in await dropped.recent(store, "city", State.FILTERED, 10)]
    history = await events.for_entity(store, "item", first.id)
    assert [(e.to_state, e.actor) for e in history] == [
        ("new", "system"), ("filtered", "system"), ("new", "operator:7")
    ]  # fmt: skip
