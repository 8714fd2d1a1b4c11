"""Extending an item's approval window: the deadline moves, and an event says who moved it.

    rule = deadlines.Extension(pipeline.approval.window, pipeline.approval.max_extensions)
    item = await store.write(deadlines.extend_sync, shown, rule, actor, now)

The event is the record: how many times an attempt was extended is counted from its
events, so the limit holds across restarts and workers without a counter of its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta

from store import backend, clock, errors, items, sql, units
from store.audit import events
from store.items import Item
from store.items.machine import State
from store.review import followups

Q = sql.load("deadlines")
#: How an extension's event reason starts (the count looks for it).
EXTENDED = "window extended"


@dataclass(frozen=True)
class Extension:
    """A pipeline's rule for extending: `by` more time each, `most` times per attempt."""

    by: timedelta
    most: int


def extensions_sync(conn: backend.Conn, item_id: int, attempt: int) -> int:
    row = conn.execute(Q["extensions"], {"entity_id": str(item_id), "attempt": attempt}).fetchone()
    return int(row[0])


def extend_sync(
    conn: backend.Conn, shown: followups.Shown, rule: Extension, actor: str, now: datetime
) -> Item:
    """Give the card's version `rule.by` more time; refused when it is no longer waiting or
    its attempt was extended `rule.most` times already."""
    item_id, attempt, version = shown
    by, most = rule.by, rule.most
    item = items.lock_sync(conn, item_id)
    if (item.state, item.attempt, item.version) != (State.AWAITING_APPROVAL, attempt, version):
        raise errors.Conflict(f"this card is out of date: item {item_id} is {item.state}")
    used = extensions_sync(conn, item_id, attempt)
    if used >= most:
        times = "once" if used == 1 else f"{used} times"
        raise errors.Refused(
            f"item {item_id}'s window was extended {times} already; its pipeline allows "
            f"{most} (approval.max_extensions)"
        )
    deadline = max(item.deadline or now, now) + by
    params = {"id": item_id, "attempt": attempt, "version": version}
    conn.execute(Q["extend"], {**params, "deadline": clock.to_ms(deadline)})
    reason = f"{EXTENDED} by {units.duration(by)}, until {units.when(deadline)}"
    events.append(
        conn, "item", item_id, item.state, item.state, actor, now, attempt=attempt, reason=reason
    )
    return dataclasses.replace(item, deadline=deadline)
