"""Retry a dispatch that failed for good: the item goes back to approved under the same
attempt and version, so the new dispatch carries the same idempotency key and the
destination can drop a repeat.

    item = redispatch.retry_sync(conn, shown, actor, now)

Only an item whose last move was a failure at dispatch (approved or dispatching to
failed) can be retried; a drafting failure is replayed instead (a new attempt). Like a
replay, this leaves a dropped state outside the transition table, and writes its event.
"""

from __future__ import annotations

from datetime import datetime

from store import backend, clock, errors, items, sql
from store.audit import events
from store.items.machine import State
from store.review import followups

Q = sql.load("redispatch")
#: How a dispatch failure's reason begins (pipelines.service.dispatcher writes it).
DISPATCH_FAILURE = "dispatch:"


def failed_at_dispatch_sync(conn: backend.Conn, item_id: int) -> bool:
    row = conn.execute(Q["last_event"], {"entity_id": str(item_id)}).fetchone()
    return (
        row is not None
        and row[1] == State.FAILED
        and row[0] in (State.APPROVED, State.DISPATCHING)
        and str(row[2] or "").startswith(DISPATCH_FAILURE)
    )


def retry_sync(conn: backend.Conn, shown: followups.Shown, actor: str, now: datetime) -> items.Item:
    """failed (at dispatch) -> approved, same attempt and version; Conflict otherwise."""
    item_id, attempt, version = shown
    item = items.get_sync(conn, item_id)
    if (item.attempt, item.version) != (attempt, version):
        raise errors.Conflict(
            f"this card shows version {version} of attempt {attempt}; item {item_id} is now at "
            f"version {item.version} of attempt {item.attempt}"
        )
    if item.state != State.FAILED or not failed_at_dispatch_sync(conn, item_id):
        raise errors.Conflict(f"item {item_id} is {item.state}, not failed at dispatch")
    reason = f"dispatch retried by {actor}"
    params = {
        "id": item_id,
        "attempt": attempt,
        "version": version,
        "reason": reason,
        "now": clock.to_ms(now),
    }
    cursor = conn.execute(Q["retry"], params)
    row = cursor.fetchone()
    if row is None:
        raise errors.Conflict(f"item {item_id} changed underneath this retry")
    events.append(
        conn,
        "item",
        item_id,
        State.FAILED,
        State.APPROVED,
        actor,
        now,
        attempt=attempt,
        reason=reason,
    )
    return items.Item.from_row(row)
