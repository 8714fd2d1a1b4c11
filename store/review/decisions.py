"""Operator decisions on a draft, as the store keeps them: the votes on a version.

A vote names the draft version and attempt its card showed (`shown_sync` locks the item
and refuses an older card, invariant 4); `vote_sync` records one and hands back the
approvals it counts toward. What a vote decides (the quorum, a reject's veto, four eyes)
is pipelines.approval.rule's; the move it causes is the caller's, in the same unit.

A decision can be taken back within the pipeline's undo window (`undo_sync`): the
item returns to awaiting_approval with the same version, its votes are forgotten and
the approval's held-back dispatch row is called off, all in one unit with its event.
Votes from the terminal are cast as TERMINAL (the control socket admits only the
bot's own Unix user); their events name that user.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Literal

from store import backend, clock, errors, items, outbox, sql, units
from store.audit import events
from store.items import Item, machine
from store.items.machine import State

Q = sql.load("items")

Choice = Literal["approve", "reject"]

#: The voter id of decisions made at the terminal (Telegram user ids start at 1).
TERMINAL = 0


def voter(operator_id: int) -> str:
    """How a vote's author is named in an event's reason."""
    return "the terminal" if operator_id == TERMINAL else events.operator(operator_id)


def dispatch_key(item_id: int, attempt: int, version: int) -> str:
    """The dedupe key of an approved version's dispatch row."""
    return f"dispatch:{item_id}:{attempt}:{version}"


def shown_sync(conn: backend.Conn, item_id: int, attempt: int, version: int) -> Item:
    """The item, locked for the unit; Conflict unless it is at the version and attempt
    its card showed."""
    return shown_with_tells_sync(conn, item_id, attempt, version)[0]


def shown_with_tells_sync(
    conn: backend.Conn, item_id: int, attempt: int, version: int
) -> tuple[Item, dict[str, Any] | None]:
    """`shown_sync`, with the tells kept with that version (pipelines.voice.sidecar)."""
    item, tells = items.lock_with_tells_sync(conn, item_id)
    if (item.attempt, item.version) != (attempt, version):
        raise errors.Conflict(
            f"this card shows version {version} of attempt {attempt}; item {item_id} is now at "
            f"version {item.version} of attempt {item.attempt}"
        )
    return item, tells


def vote_sync(
    conn: backend.Conn, item: Item, operator_id: int, choice: Choice, now: datetime
) -> tuple[int, ...] | None:
    """Record one operator's vote on the locked item's version: who approved it so far,
    this vote included, in the order cast; None when this operator had voted on it."""
    params = {
        "item_id": item.id,
        "attempt": item.attempt,
        "version": item.version,
        "operator": operator_id,
        "decision": choice,
        "now": clock.to_ms(now),
    }
    cast = conn.execute(Q["vote"], params).fetchone()
    return None if cast is None else tuple(json.loads(cast[0]))


def approvals_sync(conn: backend.Conn, item: Item) -> tuple[int, ...]:
    """Who approved the item's current version so far."""
    params = {"item_id": item.id, "attempt": item.attempt, "version": item.version}
    return tuple(row[0] for row in conn.execute(Q["approvals"], params))


def undo_sync(
    conn: backend.Conn,
    item_id: int,
    attempt: int,
    version: int,
    operator_id: int,
    now: datetime,
    *,
    window: timedelta,
    deadline: timedelta,
    actor: str | None = None,
) -> Item:
    """Take back an approval or a reject within `window` of it, by one who voted in it.

    The item is awaiting approval again (a fresh `deadline`), its votes on the version
    are forgotten and an approval's held-back dispatch row is called off.
    """
    item = shown_sync(conn, item_id, attempt, version)
    if item.state not in machine.UNDOABLE:
        raise errors.IllegalTransition(
            f"item {item_id} is {item.state}: only an approval not yet sent or a reject "
            "can be undone"
        )
    closes = item.last_transition_at + window
    if now >= closes:
        raise errors.Conflict(f"too late to undo: the window closed at {units.time_of_day(closes)}")
    params = {"item_id": item_id, "attempt": attempt, "version": version}
    if conn.execute(Q["voted"], {**params, "operator": operator_id}).fetchone() is None:
        raise errors.Conflict(f"only an operator who decided on item {item_id} can undo it")
    actor = actor or events.operator(operator_id)
    conn.execute(Q["forget_votes"], params)
    outbox.cancel_sync(conn, dispatch_key(item_id, attempt, version), f"undone by {actor}")
    moved = _move_back(conn, item, actor, now, deadline)
    return moved


def _move_back(
    conn: backend.Conn, item: Item, actor: str, now: datetime, deadline: timedelta
) -> Item:
    reason = f"{item.state} undone by {actor}"
    # A person's undo has no floor; the move is outside TRANSITIONS, as replay is.
    back = items.Move(item, State.AWAITING_APPROVAL, actor, now, reason, deadline, way="undo")
    return items.apply_one(conn, back)
