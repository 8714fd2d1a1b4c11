"""Helpers of the queue tests: items to queue (slots reference real items)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from store import backend, items

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def new_items(conn: backend.Conn, count: int, now: datetime, prefix: str = "guid") -> list[int]:
    """`count` fresh items of the news pipeline, their ids in order."""
    made = []
    for n in range(count):
        item = items.create_sync(conn, "news", "feed", f"{prefix}-{n}", {"title": f"T{n}"}, now)
        assert item is not None
        made.append(item.id)
    return made
