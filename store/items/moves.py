"""Moving items: a Move says what is to happen to one item; `apply` makes a list of them.

    answers = items.apply(conn, [items.Move(i, State.DRAFTING, "system", now) for i in waiting])
    moved = [answer.item for answer in answers if isinstance(answer, items.Moved)]
    item = items.apply_one(conn, items.Move(item, State.FAILED, "system", now, reason=why))

`apply` moves every item still as its Move saw it in one statement (its events and the
Move's effects, the outbox rows it causes, go with it: store.items.paired); each item
left behind is then locked and answered here, once: moved after all (the same work, from
where it now is), or Refused with why: stale (other work), repeat (there already),
illegal (not a move of the table), throttled (an automatic re-entry within
machine.FLOOR) or gone. Nothing is written for a refused move.

`transition_sync` and `replay_sync` are the keyword forms of one move of an item named by
its id (the suite and the benches use them): each locks its row (unless given it),
judges the move on that row, makes it as `apply` does, and raises a refusal.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

from store import backend, clock, errors, outbox, sql
from store.audit import events
from store.items import machine, paired
from store.items.machine import State
from store.items.rows import Item, lock_sync

log = logging.getLogger(__name__)

Q = sql.load("items")

Why = Literal["stale", "repeat", "illegal", "throttled", "gone"]
#: "table": a move of machine.TRANSITIONS; "undo": a decision taken back (UNDOABLE to
#: awaiting_approval); "replay": a dropped item back to new, attempt + 1; "force": a
#: dispatched one too. Undo and replay are outside the table, so its end states stay ends.
Way = Literal["table", "undo", "replay", "force"]
_REPLAYS = ("replay", "force")


class Throttled(errors.Conflict):
    """An automatic transition came too soon after the same one; try again later."""


class Seen(NamedTuple):
    """An item as a caller knows it without its row (a dispatch row's job, say): what a
    compare-and-set move needs."""

    id: int
    state: State
    attempt: int
    version: int


@dataclass(frozen=True, slots=True)
class Move:
    """One item's move: from where the caller `seen` it, to `to`, by `actor` at `at`."""

    seen: Item | Seen
    to: State
    actor: str
    at: datetime
    reason: str | None = None
    #: The window of the state moved to; None: machine.DEADLINES' (a state without one
    #: gets no deadline, whatever is passed).
    deadline: timedelta | None = None
    #: Outbox rows about the item that the move causes: written only if it is made.
    effects: Sequence[outbox.Queued] = ()
    #: The move takes the item to its next draft version, which the caller stores.
    new_version: bool = False
    #: The same work is the attempt seen, at any version (else attempt and version).
    any_version: bool = False
    way: Way = "table"

    def __post_init__(self) -> None:
        if self.effects and any(row.item_id != self.seen.id for row in self.effects):
            raise ValueError(f"an effect of item {self.seen.id}'s move is about another item")


@dataclass(frozen=True, slots=True)
class Moved:
    """A move made: the item as it left it."""

    move: Move
    item: Item


@dataclass(frozen=True, slots=True)
class Refused:
    """A move not made, and why; `item` is the row as locked (None when it is gone)."""

    move: Move
    why: Why
    detail: str
    item: Item | None

    def error(self) -> errors.Refused:
        """The refusal as the store's error (a caller that cannot go on raises it)."""
        kind = _ERRORS[self.why]
        return kind(self.detail)


_ERRORS: dict[Why, type[errors.Refused]] = {
    "stale": errors.Conflict,
    "repeat": errors.Conflict,
    "illegal": errors.IllegalTransition,
    "throttled": Throttled,
    "gone": errors.NotFound,
}


def apply(conn: backend.Conn, moves: Sequence[Move]) -> list[Moved | Refused]:
    """Make `moves` (see the module docstring): one answer per move, in their order.

    A second move of one item in the list is answered after the first is made."""
    tried, ids = set(), set()
    for n, move in enumerate(moves):
        if move.seen.id not in ids and _legal(move, move.seen.state):
            tried.add(n)
            ids.add(move.seen.id)
    made = _move(conn, [moves[n] for n in sorted(tried)])
    answers: list[Moved | Refused] = []
    for n, move in enumerate(moves):
        item = made.get(move.seen.id) if n in tried else None
        answers.append(Moved(move, item) if item is not None else _answer(conn, move))
    return answers


def apply_one(conn: backend.Conn, move: Move) -> Item:
    """`apply` for one move: the item it leaves, its refusal raised (a repeat: the item
    as it is)."""
    return _item(apply(conn, [move])[0])


def transition_sync(
    conn: backend.Conn,
    item_id: int,
    to: State,
    actor: str,
    now: datetime,
    *,
    reason: str | None = None,
    expect_version: int | None = None,
    expect_attempt: int | None = None,
    deadline: timedelta | None = None,
    locked: Item | None = None,
    queue: Sequence[outbox.Queued] = (),
) -> Item:
    """Move one item and write its one event (and `queue`, the rows the move causes).

    Re-asserting the current state with the same work (version, attempt; None: any)
    returns the row unchanged; with different work it is a Conflict. A terminal state
    accepts repeats silently. A move not in the table raises IllegalTransition.
    `locked` is the item as this unit already locked it (`lock_sync`): its row is not
    read again, and the move's compare-and-set still refuses it if it went stale."""
    if locked is not None and locked.id != item_id:
        raise ValueError(f"locked is item {locked.id}, not item {item_id}")
    current = locked if locked is not None else lock_sync(conn, item_id)
    attempt = current.attempt if expect_attempt is None else expect_attempt
    version = current.version if expect_version is None else expect_version
    same = (attempt, version) == (current.attempt, current.version)
    seen = current if same else Seen(current.id, current.state, attempt, version)
    move = Move(seen, State(to), actor, now, reason, deadline, queue)
    wanted = (expect_version, expect_attempt)
    answer = _judge(move, current, wanted) or _made(conn, move, current, "transition")
    return _item(answer)


def replay_sync(
    conn: backend.Conn,
    item_id: int,
    actor: str,
    now: datetime,
    reason: str,
    *,
    force: bool = False,
) -> Item:
    """Bring a dropped item (or, with force, a dispatched one) back to new, attempt + 1."""
    item = lock_sync(conn, item_id)
    move = Move(item, State.NEW, actor, now, reason, way="force" if force else "replay")
    return _item(_judge(move, item) or _made(conn, move, item, "replay"))


def _item(answer: Moved | Refused) -> Item:
    if isinstance(answer, Moved):
        return answer.item
    if answer.why == "repeat" and answer.item is not None:
        return answer.item
    raise answer.error()


def _legal(move: Move, state: State) -> bool:
    if move.way == "table":
        return machine.allowed(state, move.to)
    if move.way == "undo":
        return state in machine.UNDOABLE and move.to == State.AWAITING_APPROVAL
    forced = move.way == "force" and state == State.DISPATCHED
    return move.to == State.NEW and (state in machine.DROPPED or forced)


def _move(conn: backend.Conn, moves: Sequence[Move]) -> dict[int, Item]:
    """The compare-and-set under every move: each item of `moves` still as seen (and
    allowed by its floor) moves, with its event and effects; item id -> the item moved.
    One item whose row the caller holds moves by `move`, any other list by `move_many`."""
    if not moves:
        return {}
    effects = [(row, move.at) for move in moves for row in move.effects]
    queue = paired.queue_json(effects) if effects else "[]"
    one = moves[0] if len(moves) == 1 else None
    if one is not None and isinstance(one.seen, Item):
        # One item whose row the caller holds: built from it, not sent back whole.
        fields = _fields(one)
        cursor = conn.execute(Q["move"], {**fields, "queue": queue})
        made = {one.seen.id: _left(one.seen, one, fields)} if cursor.rowcount == 1 else {}
        rows = cursor.fetchall()
    else:
        seen = json.dumps([_fields(move) for move in moves])
        rows = conn.execute(Q["move_many"], {"seen": seen, "queue": queue}).fetchall()
        made = {row["id"]: Item.from_row(row) for row in rows}
    done = [move for move in moves if move.seen.id in made]
    entries = [_entry(move, made[move.seen.id]) for move in done]
    paired.follow(conn, entries, rows, [row for move in done for row in move.effects])
    for move in done:
        if move.to == State.FAILED:
            # Every path that fails an item comes through here, so each failure is
            # logged once, whatever else (an alert, an event) the caller records with it.
            item, why = made[move.seen.id], move.reason or "no reason"
            log.warning("item %s (%s) failed: %s", item.id, item.pipeline, why)
    return made


def _left(item: Item, move: Move, fields: dict[str, Any]) -> Item:
    """`item` as `move` left it: the columns it wrote, the rest as read."""
    return Item(
        item.id, item.pipeline, item.scope, item.source_id, item.payload_json,
        item.content_hash, move.to, item.attempt + fields["again"],
        item.version + fields["bump"], move.reason, item.created_at,
        clock.from_ms(fields["now"]), clock.maybe_from_ms(fields["deadline"]),
    )  # fmt: skip


def _entry(move: Move, moved: Item) -> paired.Entry:
    """A move made, as its event tells it (the attempt as the move left it: a replay's
    next one)."""
    seen = move.seen
    return paired.Entry(
        seen.id, seen.state, move.to, moved.attempt, move.actor, move.at, move.reason
    )


def _fields(move: Move) -> dict[str, Any]:
    """A move's values as its statement takes them (`move`'s parameters, a `move_many`
    :seen row). Plain str, not a State: sqlite3 binds a str subclass more slowly."""
    seen = move.seen
    return {
        "id": seen.id,
        "from_state": str(seen.state),
        "to_state": str(move.to),
        "attempt": seen.attempt,
        "version": seen.version,
        "reason": move.reason,
        "now": clock.to_ms(move.at),
        "deadline": _due(move),
        "floor_from": None if move.way == "undo" else _floor_from(move.actor, move.at),
        "bump": int(move.new_version),
        "again": int(move.way in _REPLAYS),
        "actor": events.check_actor(move.actor),
    }


def _due(move: Move) -> int | None:
    """When an item moved so is due (ms), or None when its new state has no deadline."""
    window = move.deadline if move.deadline is not None else machine.DEADLINES.get(move.to)
    return clock.to_ms(move.at + window) if move.to in machine.DEADLINES and window else None


def _floor_from(actor: str, now: datetime) -> int | None:
    """An automatic move is refused if the item entered its state automatically after
    this (ms); a person's move has no floor."""
    return clock.to_ms(now - machine.FLOOR) if actor in events.AUTOMATIC_ACTORS else None


def _answer(conn: backend.Conn, move: Move) -> Moved | Refused:
    """A move its batch left behind: the item locked, and moved after all or refused."""
    try:
        current = lock_sync(conn, move.seen.id)
    except errors.NotFound as exc:
        return Refused(move, "gone", str(exc), None)
    return _judge(move, current) or _made(conn, move, current, "move")


def _judge(
    move: Move, current: Item, wanted: tuple[int | None, int | None] | None = None
) -> Refused | None:
    """Why `move` cannot be made on `current`, the row as locked; None if it may.
    `wanted`: the (version, attempt) asked for, as a refusal names them."""
    seen, to, item_id = move.seen, move.to, current.id
    version, attempt = current.version, current.attempt
    same = attempt == seen.attempt and (move.any_version or version == seen.version)
    if move.way == "table" and current.state == to:
        if to in machine.TERMINAL or same:
            return Refused(move, "repeat", f"item {item_id} is {to} already", current)
        detail = f"item {item_id} is already {to} with version {version} attempt {attempt}; "
        detail += _asked(move, wanted)
        return Refused(move, "stale", detail, current)
    if not _legal(move, current.state):
        return Refused(move, "illegal", _illegal(move, current), current)
    if not same:
        detail = f"item {item_id} is at version {version} attempt {attempt}; {_asked(move, wanted)}"
        return Refused(move, "stale", detail, current)
    return None


def _asked(move: Move, wanted: tuple[int | None, int | None] | None) -> str:
    """The work a stale move asked for, as its refusal names it (None: any)."""
    seen = move.seen
    version, attempt = wanted or (None if move.any_version else seen.version, seen.attempt)
    return f"this request is for version {version} attempt {attempt}"


def _illegal(move: Move, current: Item) -> str:
    """Why a move is not one the item may make from where it is."""
    item_id, state = current.id, current.state
    if move.way in _REPLAYS:
        hint = (
            f" (to send it again: gatehouse replay {item_id} --force)"
            if state == State.DISPATCHED
            else ""
        )
        return (
            f"item {item_id} is {state}, not dropped; only "
            f"{', '.join(sorted(machine.DROPPED))} items can be replayed{hint}"
        )
    if move.way == "undo":
        return f"item {item_id} is {state}: only an approval or a reject can be undone"
    valid = ", ".join(sorted(machine.TRANSITIONS[state])) or "none (an end state; use replay)"
    return f"item {item_id} cannot go from {state} to {move.to}; from {state}: {valid}"


def _made(conn: backend.Conn, move: Move, current: Item, what: str) -> Moved | Refused:
    """`move` made from `current` (locked, and judged to allow it), or why not: its
    floor, or (with one writer, never) a row changed since it was locked."""
    seen = move.seen
    if (seen.state, seen.attempt, seen.version) != (
        current.state,
        current.attempt,
        current.version,
    ):
        move = dataclasses.replace(move, seen=current)  # (a transition's is its row already)
    made = _move(conn, [move])
    if current.id in made:
        return Moved(move, made[current.id])
    return _throttled(move, current, conn) or Refused(
        move, "stale", f"item {current.id} changed underneath this {what}", current
    )


def _throttled(move: Move, current: Item, conn: backend.Conn) -> Refused | None:
    """The floor's refusal (the move checks it within its statement; only a refused move
    asks which it was)."""
    if move.actor not in events.AUTOMATIC_ACTORS:
        return None
    last = events.last_automatic_entry(conn, "item", current.id, move.to)
    if last is None or move.at - last >= machine.FLOOR:
        return None
    detail = (
        f"item {current.id} entered {move.to} automatically at {last.isoformat()}; "
        f"automatic re-entry waits {machine.FLOOR.total_seconds():g} s"
    )
    return Refused(move, "throttled", detail, current)
