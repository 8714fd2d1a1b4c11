"""Operator decisions on a draft: votes toward a quorum, one reject vetoes.

A decision names the draft version and attempt its card showed; a tap on an
older card is refused (invariant 4). The vote and the transition it triggers
commit together, so fifty simultaneous taps produce exactly one transition.

A decision can be taken back within the pipeline's undo window (`undo_sync`): the
item returns to awaiting_approval with the same version, its votes are forgotten and
the approval's held-back dispatch row is called off, all in one unit with its event.
Votes from the terminal are cast as TERMINAL (the control socket admits only the
bot's own Unix user); their events name that user.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from store import backend, clock, errors, items, outbox, sql, units
from store.audit import events
from store.items import Item, machine
from store.items.machine import State

Q = sql.load("items")

Choice = Literal["approve", "reject"]
Outcome = Literal["approved", "rejected", "pending", "unchanged"]

#: The voter id of decisions made at the terminal (Telegram user ids start at 1).
TERMINAL = 0
#: The longest reject reason kept (characters); a longer one is cut.
MAX_REASON = 300


def voter(operator_id: int) -> str:
    """How a vote's author is named in an event's reason."""
    return "the terminal" if operator_id == TERMINAL else events.operator(operator_id)


def dispatch_key(item_id: int, attempt: int, version: int) -> str:
    """The dedupe key of an approved version's dispatch row."""
    return f"dispatch:{item_id}:{attempt}:{version}"


@dataclass(frozen=True)
class Decision:
    item: Item
    #: approved/rejected: this decision moved the item; pending: a vote toward the
    #: quorum was recorded; unchanged: a repeat, or the item was decided already.
    outcome: Outcome
    approvals: tuple[int, ...]
    quorum: int


def decide_sync(
    conn: backend.Conn,
    item_id: int,
    attempt: int,
    version: int,
    operator_id: int,
    choice: Choice,
    now: datetime,
    *,
    quorum: int = 1,
    reason: str | None = None,
    actor: str | None = None,
    queue: Callable[[Decision], Sequence[outbox.Queued]] | None = None,
) -> Decision:
    """Record one operator's decision inside the caller's unit (which may add its own rows).

    `await store.write(decisions.decide_sync, item_id, attempt, version, operator, "approve", now)`

    `reason` goes with a reject into its event; `actor` names who decided when it is not
    the Telegram operator `operator_id`. Who may approve (four eyes) is the caller's
    rule: pipelines.approval.flow checks it first. `queue` answers the outbox rows a
    decision that counts brings (a card edit, a dispatch), given the decision as it will
    be: they are written with its move, or alone with a vote toward the quorum.
    """
    if choice not in ("approve", "reject"):
        raise ValueError(f"unknown decision {choice!r}; valid: approve, reject")
    item = items.lock_sync(conn, item_id)
    if (item.attempt, item.version) != (attempt, version):
        raise errors.Conflict(
            f"this card shows version {version} of attempt {attempt}; item {item_id} is now at "
            f"version {item.version} of attempt {item.attempt}"
        )
    if item.state != State.AWAITING_APPROVAL:
        return Decision(item, "unchanged", approvals_sync(conn, item), quorum)
    params = {
        "item_id": item_id,
        "attempt": attempt,
        "version": version,
        "operator": operator_id,
        "decision": choice,
        "now": clock.to_ms(now),
    }
    cast = conn.execute(Q["vote"], params).fetchone()
    if cast is None:  # this operator already voted on it
        return Decision(item, "unchanged", approvals_sync(conn, item), quorum)
    approvals = tuple(json.loads(cast[0]))
    actor = actor or events.operator(operator_id)
    to: State
    outcome: Outcome
    if choice == "reject":
        to, outcome = State.REJECTED, "rejected"
        why = f"rejected by {actor}" + (f": {reason[:MAX_REASON]}" if reason else "")
    elif len(approvals) >= quorum:
        to, outcome = State.APPROVED, "approved"
        who = ", ".join(actor if o == operator_id else voter(o) for o in approvals)
        why = f"approved by {who}"
    else:
        pending = Decision(item, "pending", approvals, quorum)
        for row in queue(pending) if queue else ():
            outbox.put_sync(conn, row, now)
        return pending
    # The rows are asked for with the item as the move leaves it, and written by the move.
    ahead = Decision(dataclasses.replace(item, state=to, reason=why), outcome, approvals, quorum)
    effects = queue(ahead) if queue else ()
    moved = items.apply_one(conn, items.Move(item, to, actor, now, why, effects=effects))
    return Decision(moved, outcome, approvals, quorum)


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
    item = items.lock_sync(conn, item_id)
    if (item.attempt, item.version) != (attempt, version):
        raise errors.Conflict(
            f"this card shows version {version} of attempt {attempt}; item {item_id} is now at "
            f"version {item.version} of attempt {item.attempt}"
        )
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


def approvals_sync(conn: backend.Conn, item: Item) -> tuple[int, ...]:
    """Who approved the item's current version so far."""
    params = {"item_id": item.id, "attempt": item.attempt, "version": item.version}
    return tuple(row[0] for row in conn.execute(Q["approvals"], params))
