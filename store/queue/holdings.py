"""What open slots hold: a schedule's queue, and the moves that change it.

    slot = holdings.assign_sync(conn, "city-channel", item_id, "system", now)
    holdings.swap_sync(conn, upper.id, lower.id, (upper.item_id, lower.item_id), actor, now)
    left = holdings.pull_sync(conn, item_id, actor, now)     # its place to the next items
    holdings.substitute_sync(conn, slot.id, "system", now)    # a failed slot's walk
    expired = holdings.expire_sync(conn, slot.id, "scheduler", now)

A schedule's queue is the items its open slots hold, in slot order. Taking one out of
it (pulled, posted now, taken by a substitution) lays the items after it out again over
the open slots from its place on, each one slot earlier; an expired slot's item goes
first into the open slots after it, the others each one slot later. Each slot whose item
changes writes one event (`moved`, the item it now holds), after the event of the move
that caused the walk, so the log tells the walk slot by slot. Each write is a
compare-and-set on the item the caller (or this unit) saw: a stale list's tap changes
nothing and raises SlotConflict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from store import backend, clock, errors
from store.backends import core
from store.queue import machine, slots
from store.queue.machine import Kind, SlotState
from store.queue.slots import Q, Slot

S = SlotState


@dataclasses.dataclass(frozen=True)
class Expired:
    """An expired slot, and the item of the queue left without an open slot (the
    schedule's last one was full), which the caller must place once more are opened."""

    slot: Slot
    unplaced: int | None


def assign_sync(
    conn: backend.Conn, schedule: str, item_id: int, actor: str, now: datetime
) -> Slot | None:
    """Queue an item in the schedule's next free slot (after every item queued before
    it), `scheduled`; the slot that holds it already if one does; None when no free
    slot is open (the caller opens more, or waits)."""
    held = slots.of_item_sync(conn, item_id)
    if held is not None:
        return held
    params = {"schedule": schedule, "now": clock.to_ms(now)}
    free = backend.fetch_one(conn, Q["next_free"], params, Slot.from_row)
    if free is None:
        return None
    return _hold(conn, free, item_id, "scheduled", actor, now)


def swap_sync(
    conn: backend.Conn,
    first_id: int,
    second_id: int,
    seen: tuple[int | None, int | None],
    actor: str,
    now: datetime,
) -> tuple[Slot, Slot]:
    """Exchange the items of two open slots of one schedule (⬆ / ⬇, "next slot"), as the
    caller `seen` them (first's, second's): `moved` on each. SlotConflict when either
    holds something else (a stale list); a repeat (already swapped) changes nothing."""
    first, second = slots.get_sync(conn, first_id), slots.get_sync(conn, second_id)
    if first.schedule != second.schedule:
        raise machine.SlotConflict(f"slots {first_id} and {second_id} are of two schedules")
    verdicts = {
        machine.judge_holding(first.seen(), seen[0], seen[1]),
        machine.judge_holding(second.seen(), seen[1], seen[0]),
    }
    if verdicts == {"no-op"}:
        return first, second
    if "no-op" in verdicts:  # one swapped, the other not: neither holds what was seen
        raise machine.SlotConflict(f"slots {first_id} and {second_id} changed since seen")
    upper, lower = _lay_out(conn, [first, second], [seen[1], seen[0]], "moved", actor, now)
    return upper, lower


def pull_sync(conn: backend.Conn, item_id: int, actor: str, now: datetime) -> Slot | None:
    """Take an item out of the queue (back to a decision), `pulled`; the items after it
    each move one slot earlier. The slot it left as it is now; None when it held none.
    IllegalTransition when its slot is firing already."""
    return _take_out(conn, item_id, "pulled", actor, now)


def post_now_sync(conn: backend.Conn, item_id: int, actor: str, now: datetime) -> Slot | None:
    """As `pull_sync`, for an item posted at once (its dispatch is the caller's to
    queue in the same unit), `posted_now`."""
    return _take_out(conn, item_id, "posted_now", actor, now)


def substitute_sync(conn: backend.Conn, slot_id: int, actor: str, now: datetime) -> Slot:
    """The walk of a substituting slot: firing again with the next queued item of its
    schedule (`slot_substituted`, attempt + 1), whose place goes to the items after it;
    fired empty when none is queued. Floored within machine.FLOOR of the failure."""
    slot = slots.get_sync(conn, slot_id)
    if slot.state in machine.TERMINAL:  # a repeat of a walk that ended
        return slot
    if slot.state != S.SUBSTITUTING:
        raise errors.IllegalTransition(f"slot {slot_id} is {slot.state}, not substituting")
    following = _open_from(conn, slot.schedule, clock.to_ms(slot.slot_at) + 1)
    queued = next((s for s in following if s.item_id is not None), None)
    if queued is None:
        return slots.transition_sync(conn, slot_id, S.FIRED, None, actor, now, "no item left")
    machine.judge(slot.seen(), S.FIRING, queued.item_id, now)  # the floor before any write
    assert queued.item_id is not None
    taken = _hold(conn, queued, None, "moved", actor, now, f"to slot {slot.id}")
    detail = f"item {slot.item_id} failed"
    fired = slots.transition_sync(conn, slot_id, S.FIRING, queued.item_id, actor, now, detail)
    _close_up(conn, taken, actor, now)
    return fired


def expire_sync(conn: backend.Conn, slot_id: int, actor: str, now: datetime) -> Expired:
    """An open slot whose time passed beyond its grace: expired; its item goes first
    into the open slots after it, the queue after it each one slot later."""
    slot = slots.get_sync(conn, slot_id)
    if slot.state == S.EXPIRED:  # a repeat
        return Expired(slot, None)
    expired = slots.transition_sync(conn, slot_id, S.EXPIRED, slot.item_id, actor, now)
    if slot.item_id is None:
        return Expired(expired, None)
    following = _open_from(conn, slot.schedule, clock.to_ms(slot.slot_at) + 1)
    queue: list[int | None] = [slot.item_id]
    queue += [s.item_id for s in following if s.item_id is not None]
    queue += [None] * (len(following) - len(queue))
    _lay_out(conn, following, queue[: len(following)], "moved", actor, now)
    return Expired(expired, queue[len(following)] if len(queue) > len(following) else None)


def _take_out(
    conn: backend.Conn, item_id: int, kind: Kind, actor: str, now: datetime
) -> Slot | None:
    held = slots.of_item_sync(conn, item_id)
    if held is None:
        return None
    machine.judge_holding(held.seen(), item_id, None)
    left = _hold(conn, held, None, kind, actor, now)
    return _close_up(conn, left, actor, now)


def _close_up(conn: backend.Conn, gap: Slot, actor: str, now: datetime) -> Slot:
    """Lay the queue after an emptied open slot out again from it: each item one
    slot earlier. The emptied slot as it is then."""
    following = _open_from(conn, gap.schedule, clock.to_ms(gap.slot_at))
    queue = [s.item_id for s in following if s.item_id is not None]
    laid = _lay_out(
        conn, following, queue + [None] * (len(following) - len(queue)), "moved", actor, now
    )
    return next((s for s in laid if s.id == gap.id), gap)


def _lay_out(
    conn: backend.Conn,
    over: Sequence[Slot],
    items: Sequence[int | None],
    kind: Kind,
    actor: str,
    now: datetime,
) -> list[Slot]:
    """Give each slot of `over` the item at its place in `items`: those whose item
    changes are emptied first (an item is in one holding slot at a time, and the
    unique index checks each row as written), then given theirs, one event each."""
    changing = [
        (slot, item) for slot, item in zip(over, items, strict=True) if slot.item_id != item
    ]
    emptied = {slot.id: _cas(conn, slot, None) for slot, _ in changing if slot.item_id is not None}
    laid = {slot.id: slot for slot in over}
    for slot, item in changing:
        now_empty = emptied.get(slot.id, slot)
        laid[slot.id] = now_empty if item is None else _cas(conn, now_empty, item)
        told = None if item is not None else "now empty"
        slots.log(conn, laid[slot.id], S.OPEN, kind, actor, now, told)
    return [laid[slot.id] for slot in over]


def _hold(
    conn: backend.Conn,
    slot: Slot,
    item_id: int | None,
    kind: Kind,
    actor: str,
    now: datetime,
    detail: str | None = None,
) -> Slot:
    """Change one open slot's item, with its event (for an emptied slot, the item it
    let go)."""
    held = _cas(conn, slot, item_id)
    told = held if item_id is not None else dataclasses.replace(held, item_id=slot.item_id)
    slots.log(conn, told, S.OPEN, kind, actor, now, detail)
    return held


def _cas(conn: backend.Conn, slot: Slot, item_id: int | None) -> Slot:
    params = {"id": slot.id, "item_id": item_id, "seen_item": slot.item_id}
    held = backend.fetch_one(conn, Q["hold"], params, Slot.from_row)
    if held is None:
        raise machine.SlotConflict(
            f"slot {slot.id} no longer holds item {slot.item_id} as open (a stale list?)"
        )
    return held


def _open_from(conn: backend.Conn, schedule: str, since_ms: int) -> list[Slot]:
    """The schedule's open slots from `since_ms` on, in order."""
    params = {"schedule": schedule, "slot_at": since_ms}
    return backend.fetch_all(conn, Q["open_from"], params, Slot.from_row)


assign = core.writes(assign_sync)
swap = core.writes(swap_sync)
pull = core.writes(pull_sync)
post_now = core.writes(post_now_sync)
substitute = core.writes(substitute_sync)
expire = core.writes(expire_sync)
