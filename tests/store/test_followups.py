"""Reminders, escalations and bulk offers, on either backend."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from store import db, errors, items
from store.review import followups


async def test_each_nudge_is_sent_once_and_read_back_by_item(
    store: db.Store, now: datetime
) -> None:
    made = [
        await store.write(items.create_sync, "news", "feed", f"g{n}", {"n": n}, now) for n in (1, 2)
    ]
    ids = [item.id for item in made if item is not None]

    assert await store.write(lambda conn: followups.nudge_sync(conn, ids[0], 1, "remind", now))
    assert not await store.write(lambda conn: followups.nudge_sync(conn, ids[0], 1, "remind", now))
    assert await store.write(lambda conn: followups.nudge_sync(conn, ids[1], 1, "escalate", now))
    assert await followups.nudges_of(store, ids) == {(ids[0], 1, "remind"), (ids[1], 1, "escalate")}
    assert await store.read(followups.nudged_sync, ids[1], 1, "escalate")
    assert await followups.nudges_of(store, []) == set()


async def test_a_bulk_offer_is_decided_once(store: db.Store, now: datetime) -> None:
    offer = await followups.offer(store, "news", [(1, 1, 1), (2, 1, 2)], now)
    found = await followups.get_offer(store, offer.id, now + timedelta(minutes=1))
    assert found.items == ((1, 1, 1), (2, 1, 2))
    await store.write(lambda conn: followups.close_offer_sync(conn, offer.id, now))
    with pytest.raises(errors.Conflict, match="decided already"):
        await store.write(lambda conn: followups.close_offer_sync(conn, offer.id, now))
