"""Publishing slots as rows: every change writes the slot and its event in one unit.

    await slots.open_window(store, "city-channel", times, now)   # idempotent
    slot = await slots.assign(store, "city-channel", item_id, "system", now)
    fired = await slots.fire(store, slot.id, "scheduler", now)    # None: not ours to fire
    await slots.deliver(store, slot.id, "system", later)          # the destination answered
    breached = await slots.sweep(store, now)                      # alert once for each

The machine and its rules are store.queue.machine's; here they are applied to the row
as read in the unit, and each write is a compare-and-set on what was judged, so with
several PostgreSQL workers a second writer of the same slot moves nothing (firing: it
gets None) or runs again and is judged on the first one's row. Every change writes one
event (entity "slot", its kind first in the reason: machine.reason).

What an open slot holds changes here too (`assign`, `swap`, `pull`, `post_now`): the
queue of a schedule is the items its open slots hold, in slot order, and an item taken
out of it (pulled, posted now, fired by substitution) leaves its place to the ones
after it, each moving one slot earlier (store.queue.holdings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime

from store import backend, clock, errors, sql
from store.audit import events
from store.backends import core
from store.queue import machine
from store.queue.machine import Kind, SlotState

Q = sql.load("queue_slots")
S = SlotState


@dataclasses.dataclass(frozen=True)
class Slot(backend.Record):
    id: int
    schedule: str
    #: The slot's posting time (UTC).
    slot_at: datetime
    state: SlotState
    item_id: int | None
    #: How many times it started firing (a substitution is another attempt).
    attempt: int
    #: When it entered its state: the floor and the sweep count from here.
    changed_at: datetime
    #: Why its last transition was made (a breach's, a failure's), if said.
    reason: str | None

    def seen(self) -> machine.Seen:
        return machine.Seen(self.id, self.state, self.item_id, self.changed_at)


def get_sync(conn: backend.Conn, slot_id: int) -> Slot:
    found = backend.fetch_one(conn, Q["get"], {"id": slot_id}, Slot.from_row)
    if found is None:
        raise errors.NotFound(f"no slot {slot_id}")
    return found


def log(
    conn: backend.Conn,
    slot: Slot,
    left: SlotState | None,
    kind: Kind,
    actor: str,
    now: datetime,
    detail: str | None = None,
) -> None:
    """The event of a change just made to `slot` (as it is now), from state `left`."""
    why = machine.reason(kind, slot.item_id, detail)
    events.append(
        conn, "slot", slot.id, left, slot.state, actor, now, attempt=slot.attempt, reason=why
    )


def open_window_sync(
    conn: backend.Conn, schedule: str, times: Iterable[datetime], now: datetime
) -> list[Slot]:
    """Open a slot at each of `times` (UTC) that has none yet, each with its event; the
    slots made by this call, in the order of `times`."""
    made = []
    for at in times:
        params = {"schedule": schedule, "slot_at": clock.to_ms(at), "now": clock.to_ms(now)}
        slot = backend.fetch_one(conn, Q["open"], params, Slot.from_row)
        if slot is not None:
            log(conn, slot, None, "opened", "scheduler", now)
            made.append(slot)
    return made


def transition_sync(
    conn: backend.Conn,
    slot_id: int,
    to: SlotState,
    item_id: int | None,
    actor: str,
    now: datetime,
    detail: str | None = None,
) -> Slot:
    """Move a slot to `to` holding `item_id`, with its event, by machine.judge's rules:
    the slot as it is (a repeat writes nothing); IllegalTransition, SlotConflict or
    Floored raised, nothing written. The moves that also walk the queue (a substitution,
    an expiry) are store.queue.holdings': this one moves the slot alone."""
    slot = get_sync(conn, slot_id)
    if machine.judge(slot.seen(), to, item_id, now) == "no-op":
        return slot
    return _move(conn, slot, to, item_id, actor, now, detail)


def _move(
    conn: backend.Conn,
    slot: Slot,
    to: SlotState,
    item_id: int | None,
    actor: str,
    now: datetime,
    detail: str | None,
) -> Slot:
    """Make a judged move, compare-and-set on the slot as judged; SlotConflict when it
    changed since (another worker's unit, which PostgreSQL's isolation lets commit)."""
    params = {
        "id": slot.id,
        "to": str(to),
        "item_id": item_id,
        "bump": 1 if to == S.FIRING else 0,
        "now": clock.to_ms(now),
        "reason": detail,
        "from_state": str(slot.state),
        "seen_item": slot.item_id,
    }
    moved = backend.fetch_one(conn, Q["move"], params, Slot.from_row)
    if moved is None:
        raise machine.SlotConflict(f"slot {slot.id} changed while it was being moved to {to}")
    log(conn, moved, slot.state, machine.kind_of(slot.state, to), actor, now, detail)
    return moved


def fire_sync(conn: backend.Conn, slot_id: int, actor: str, now: datetime) -> Slot | None:
    """Claim an open slot: to firing with the item it holds (its dispatch is the
    caller's to queue in the same unit), or to fired when it holds none. None when the
    slot is no longer open: another worker claimed it, and nothing was written. Floored
    when it opened less than machine.FLOOR ago."""
    slot = get_sync(conn, slot_id)
    if slot.state != S.OPEN:
        return None
    to = S.FIRING if slot.item_id is not None else S.FIRED
    detail = None if slot.item_id is not None else "nothing was queued for it"
    machine.judge(slot.seen(), to, slot.item_id, now)
    return _move(conn, slot, to, slot.item_id, actor, now, detail)


def deliver_sync(conn: backend.Conn, slot_id: int, item_id: int, actor: str, now: datetime) -> Slot:
    """A firing slot's item was delivered: fired (a repeat: as it is)."""
    return transition_sync(conn, slot_id, S.FIRED, item_id, actor, now)


def fail_sync(
    conn: backend.Conn, slot_id: int, item_id: int, actor: str, now: datetime, detail: str
) -> Slot:
    """A firing slot's dispatch failed for good: substituting, `detail` saying why; the
    walk (`holdings.substitute_sync`) then gives it the next queued item."""
    return transition_sync(conn, slot_id, S.SUBSTITUTING, item_id, actor, now, detail)


def sweep_sync(conn: backend.Conn, now: datetime) -> list[Slot]:
    """Move every slot stuck in a transient state over machine.STUCK_AFTER to breach,
    with the reason; the slots breached now (breach is an end state, so each is
    returned by one sweep only: alert for those)."""
    before = clock.to_ms(now - machine.STUCK_AFTER)
    stuck = backend.fetch_all(conn, Q["stuck"], {"before": before}, Slot.from_row)
    breached = []
    for slot in stuck:
        minutes = int((now - slot.changed_at).total_seconds() // 60)
        detail = f"stuck in {slot.state} since {slot.changed_at.isoformat()} ({minutes} min)"
        breached.append(
            transition_sync(conn, slot.id, S.BREACH, slot.item_id, "sweep", now, detail)
        )
    return breached


def due_sync(conn: backend.Conn, now: datetime) -> list[Slot]:
    """Open slots whose time has come, oldest first."""
    return backend.fetch_all(conn, Q["due"], {"now": clock.to_ms(now)}, Slot.from_row)


def upcoming_sync(
    conn: backend.Conn, schedule: str, since: datetime, limit: int = 50
) -> list[Slot]:
    """A schedule's slots from `since` on, in order, at most `limit`."""
    params = {"schedule": schedule, "since": clock.to_ms(since), "limit": limit}
    return backend.fetch_all(conn, Q["upcoming"], params, Slot.from_row)


def of_item_sync(conn: backend.Conn, item_id: int) -> Slot | None:
    """The slot holding an item (open, firing or substituting), if any."""
    return backend.fetch_one(conn, Q["of_item"], {"item_id": item_id}, Slot.from_row)


open_window = core.writes(open_window_sync)
transition = core.writes(transition_sync)
fire = core.writes(fire_sync)
deliver = core.writes(deliver_sync)
fail = core.writes(fail_sync)
sweep = core.writes(sweep_sync)
