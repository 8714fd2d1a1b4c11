"""The publishing slot state machine, declared once.

                ┌───────────── fired_empty (no item) ─────────────┐
                │                                                 ▼
    opened ──► open ──fired──► firing ──delivered──────────────► fired
                │                │  ▲                             ▲
                │      fire_failed  slot_substituted              │
                │                ▼  │                             │
                │             substituting ──fired_empty (none left)
                │                │
                └─► expired      └──────► breach ◄── firing (stuck past STUCK_AFTER)

A slot is one posting time of one schedule. While `open` it holds at most one queued
item; the item may change (`scheduled`, `moved`, `pulled`, `posted_now`): those are
holdings, not transitions, and `judge_holding` rules them. Every other change is a
transition of TRANSITIONS, whose entries name the event kind each move writes: one
table says both what may happen and what the audit log calls it.

    state         kind of state  what it means
    open          waiting        opened for its time; holds the next item, or none yet
    firing        transient      claimed: its item's dispatch is queued (the claim is
                                 the compare-and-set open -> firing: a slot fires once)
    substituting  transient      the dispatch failed for good; the next item is sought
    fired         terminal       delivered, or fired empty (the event says which)
    expired       terminal       its time passed beyond the schedule's grace unfired
    breach        terminal       stuck in a transient state past STUCK_AFTER (the sweep)

The rules, pure functions of the slot as read (`judge`):
- a move not in TRANSITIONS raises IllegalTransition, naming the moves there are;
- the same state again with the same item is a no-op, with another item a SlotConflict
  (two actors fighting for the slot, or a caller that saw an older slot);
- an end state accepts any repeat silently;
- two transitions of one slot are at least FLOOR apart: Floored says when it may move
  (a crash loop cannot write an event storm; holdings are not floored, so a person
  reordering the queue is never refused);
- `stuck` tells the sweep a slot sat in a transient state over STUCK_AFTER: breach.

The SQL CHECK on slots.state is written in the migrations; `check_constraint()` builds
it from STATES, and tests/store/queue/test_machine.py fails if they differ.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal, cast, get_args

from store import errors
from store.items.machine import check_tables


class SlotState(StrEnum):
    OPEN = "open"  #: waiting for its time; holds the next queued item, or none yet
    FIRING = "firing"  #: claimed; its item's dispatch is queued (transient)
    SUBSTITUTING = "substituting"  #: its dispatch failed for good; the next item is sought
    FIRED = "fired"  #: delivered, or fired empty; terminal
    EXPIRED = "expired"  #: its time passed beyond the schedule's grace unfired; terminal
    BREACH = "breach"  #: stuck in a transient state past STUCK_AFTER; terminal


S = SlotState
STATES: tuple[SlotState, ...] = tuple(SlotState)

#: What a slot's event says happened. Transitions' kinds come from TRANSITIONS; the
#: rest are holdings of an open slot (its item changing) and its opening.
Kind = Literal[
    "opened",
    "scheduled",
    "moved",
    "pulled",
    "posted_now",
    "fired",
    "fired_empty",
    "delivered",
    "fire_failed",
    "slot_substituted",
    "expired",
    "sla_breach",
]
KINDS: tuple[Kind, ...] = get_args(Kind)
HOLDINGS: frozenset[Kind] = frozenset({"scheduled", "moved", "pulled", "posted_now"})

#: The moves allowed, each with the kind of event it writes.
MOVES: dict[SlotState, dict[SlotState, Kind]] = {
    S.OPEN: {S.FIRING: "fired", S.FIRED: "fired_empty", S.EXPIRED: "expired"},
    S.FIRING: {S.FIRED: "delivered", S.SUBSTITUTING: "fire_failed", S.BREACH: "sla_breach"},
    S.SUBSTITUTING: {
        S.FIRING: "slot_substituted",
        S.FIRED: "fired_empty",
        S.BREACH: "sla_breach",
    },
    S.FIRED: {},
    S.EXPIRED: {},
    S.BREACH: {},
}
TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {s: frozenset(m) for s, m in MOVES.items()}

#: End states: any repeat is silently accepted; nothing leaves them.
TERMINAL: frozenset[SlotState] = frozenset({S.FIRED, S.EXPIRED, S.BREACH})
#: States a slot must not stay in: past STUCK_AFTER the sweep moves it to breach.
TRANSIENT: frozenset[SlotState] = frozenset({S.FIRING, S.SUBSTITUTING})
#: States whose item is held: an item is in at most one such slot (a unique index).
HOLDING: frozenset[SlotState] = frozenset({S.OPEN, S.FIRING, S.SUBSTITUTING})
#: Moves that must carry an item, and moves that must carry none (a slot fired empty).
WITH_ITEM: frozenset[SlotState] = frozenset({S.FIRING})
EMPTY_MOVES: frozenset[tuple[SlotState, SlotState]] = frozenset(
    {(S.OPEN, S.FIRED), (S.SUBSTITUTING, S.FIRED)}
)

#: Least time between two transitions of one slot.
FLOOR = timedelta(seconds=5)
#: Longest a slot may stay in a transient state before the sweep calls it a breach.
STUCK_AFTER = timedelta(minutes=15)


class SlotConflict(errors.Conflict):
    """The slot is already where the move goes, with another item, or holds another item
    than the caller saw: two actors fight for it; nothing was written."""


class Floored(errors.Conflict):
    """The slot changed state less than FLOOR ago; it may move at `may_move_at`."""

    def __init__(self, message: str, may_move_at: datetime) -> None:
        super().__init__(message)
        self.may_move_at = may_move_at


@dataclass(frozen=True, slots=True)
class Seen:
    """A slot as a rule needs it: where it is, what it holds, when it entered its state."""

    id: int
    state: SlotState
    item_id: int | None
    changed_at: datetime


Verdict = Literal["move", "no-op"]


def judge(slot: Seen, to: SlotState, item_id: int | None, now: datetime) -> Verdict:
    """Whether moving `slot` to `to` holding `item_id` is made or is a repeat; raise
    IllegalTransition, SlotConflict or Floored when it may not be made."""
    if to == slot.state:
        if slot.state in TERMINAL or item_id == slot.item_id:
            return "no-op"
        raise SlotConflict(
            f"slot {slot.id} is {slot.state} with item {slot.item_id}, not item {item_id}"
        )
    if to not in TRANSITIONS[slot.state]:
        allowed = ", ".join(sorted(TRANSITIONS[slot.state])) or "none: it is an end state"
        raise errors.IllegalTransition(
            f"slot {slot.id} cannot move from {slot.state} to {to} (allowed: {allowed})"
        )
    _check_item(slot, to, item_id)
    may_move_at = slot.changed_at + FLOOR
    if now < may_move_at:
        raise Floored(
            f"slot {slot.id} entered {slot.state} at {slot.changed_at.isoformat()};"
            f" it may move from {may_move_at.isoformat()}",
            may_move_at,
        )
    return "move"


def _check_item(slot: Seen, to: SlotState, item_id: int | None) -> None:
    """A move carries the slot's own item, except a fire with nothing queued (none) and
    a substitution (another item than the one that failed)."""
    if (slot.state, to) in EMPTY_MOVES:
        if item_id is not None:
            raise errors.IllegalTransition(f"slot {slot.id} moves to {to} empty, not with an item")
        if slot.state == S.OPEN and slot.item_id is not None:
            raise SlotConflict(f"slot {slot.id} holds item {slot.item_id}: it fires, not empty")
    elif to in WITH_ITEM and item_id is None:
        raise errors.IllegalTransition(f"slot {slot.id} cannot move to {to} without an item")
    elif (slot.state, to) == (S.SUBSTITUTING, S.FIRING):
        if item_id == slot.item_id:
            raise SlotConflict(f"slot {slot.id} cannot be substituted by the item that failed")
    elif item_id != slot.item_id:
        raise SlotConflict(f"slot {slot.id} holds item {slot.item_id}, not item {item_id}")


def judge_holding(slot: Seen, seen_item: int | None, new_item: int | None) -> Verdict:
    """Whether an open slot's item may change from `seen_item` (what the caller saw) to
    `new_item`: a repeat when it already holds `new_item`; SlotConflict when it holds
    neither; IllegalTransition when the slot is no longer open."""
    if slot.state != S.OPEN:
        raise errors.IllegalTransition(
            f"slot {slot.id} is {slot.state}: only an open slot's item may change"
        )
    if slot.item_id == new_item:
        return "no-op"
    if slot.item_id != seen_item:
        raise SlotConflict(f"slot {slot.id} holds item {slot.item_id}, not item {seen_item}")
    return "move"


def stuck(slot: Seen, now: datetime) -> bool:
    """Whether the sweep must move the slot to breach."""
    return slot.state in TRANSIENT and now - slot.changed_at > STUCK_AFTER


def kind_of(source: SlotState, target: SlotState) -> Kind:
    return MOVES[source][target]


def check_constraint(column: str = "state") -> str:
    """The CHECK clause that the slots table must carry, built from STATES."""
    listed = ", ".join(f"'{state.value}'" for state in STATES)
    return f"CHECK ({column} IN ({listed}))"


_REASON = re.compile(r"^(?P<kind>[a-z_]+)(?: item (?P<item>\d+))?(?:: (?P<detail>.*))?$", re.S)


def reason(kind: Kind, item_id: int | None, detail: str | None = None) -> str:
    """An event's reason: its kind first, then the item it concerns, then why. The kind
    is in the reason, which the chain's hash covers, so it cannot be changed unseen."""
    text = kind if item_id is None else f"{kind} item {item_id}"
    return text if detail is None else f"{text}: {detail}"


def parse_reason(text: str) -> tuple[Kind, int | None, str | None]:
    """(kind, item id, detail) of a slot event's reason."""
    found = _REASON.match(text)
    if found is None or found["kind"] not in KINDS:
        raise ValueError(f"not a slot event's reason: {text!r}")
    item = found["item"]
    return cast(Kind, found["kind"]), None if item is None else int(item), found["detail"]


check_tables(SlotState, TRANSITIONS, TERMINAL, TRANSIENT, {s: S.BREACH for s in TRANSIENT})
