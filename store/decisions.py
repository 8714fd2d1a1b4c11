"""Operator decisions on a draft: votes toward a quorum, one reject vetoes.

A decision names the draft version and attempt its card showed; a tap on an
older card is refused (invariant 4). The vote and the transition it triggers
commit together, so fifty simultaneous taps produce exactly one transition.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from store import backend, clock, errors, events, items, sql
from store.items import Item
from store.machine import State

Q = sql.load("items")

Choice = Literal["approve", "reject"]
Outcome = Literal["approved", "rejected", "pending", "unchanged"]


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
) -> Decision:
    """Record one operator's decision inside the caller's unit (which may add its own rows).

    `await store.write(decisions.decide_sync, item_id, attempt, version, operator, "approve", now)`
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
        return Decision(item, "unchanged", _approvals(conn, item), quorum)
    params = {
        "item_id": item_id,
        "attempt": attempt,
        "version": version,
        "operator": operator_id,
        "decision": choice,
        "now": clock.to_ms(now),
    }
    if conn.execute(Q["vote"], params).rowcount == 0:  # this operator already voted on it
        return Decision(item, "unchanged", _approvals(conn, item), quorum)
    approvals = _approvals(conn, item)
    actor = events.operator(operator_id)
    if choice == "reject":
        moved = items.transition_sync(
            conn,
            item_id,
            State.REJECTED,
            actor,
            now,
            reason=f"rejected by {actor}",
            expect_version=version,
        )
    elif len(approvals) >= quorum:
        who = ", ".join(events.operator(o) for o in approvals)
        moved = items.transition_sync(
            conn,
            item_id,
            State.APPROVED,
            actor,
            now,
            reason=f"approved by {who}",
            expect_version=version,
        )
    else:
        return Decision(item, "pending", approvals, quorum)
    return Decision(moved, "rejected" if choice == "reject" else "approved", approvals, quorum)


def _approvals(conn: backend.Conn, item: Item) -> tuple[int, ...]:
    params = {"item_id": item.id, "attempt": item.attempt, "version": item.version}
    return tuple(row[0] for row in conn.execute(Q["approvals"], params))
