"""The rows a decision queues with it: the card's edit (its status line) and, for an
approval, the dispatch, held back through the undo window.

    rows = card_edits.decision_rows(pipeline, decision, version, operator, choice, ...)

Also the card edits of an operator's new version, and the words a card uses for who
the quorum still waits for.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from pipelines.approval import quorum
from pipelines.approval.rule import Decision
from store import backend, outbox, payloads, units
from store.audit import events
from store.items import Item
from store.items.machine import State
from store.review import decisions

if TYPE_CHECKING:
    from pipelines.config import spec


def edit_card_sync(
    conn: backend.Conn, pipeline: spec.Pipeline, item: Item, version: int, status: str,
    now: datetime, *, decided_by: Sequence[int] = (), undo_until: datetime | None = None,
    state: State | None = None,
) -> None:  # fmt: skip
    """Queue the edit of the card showing `version` of the item's attempt: its status line
    and, from the item's `state` (and `undo_until`), which buttons it keeps."""
    row = card_edit_row(
        pipeline, item, version, status, decided_by=decided_by, undo_until=undo_until,
        state=state,
    )  # fmt: skip
    outbox.put_sync(conn, row, now)


def card_edit_row(
    pipeline: spec.Pipeline, item: Item, version: int, status: str, *,
    decided_by: Sequence[int] = (), undo_until: datetime | None = None,
    state: State | None = None,
) -> outbox.Queued:  # fmt: skip
    """The outbox row of `edit_card_sync`, to queue with a move or alone."""
    edit = payloads.CardEdit(
        item.id, item.attempt, version, (state or item.state).value, status, tuple(decided_by),
        undo_until=undo_until.isoformat() if undo_until else None, pipeline=pipeline.name,
    )  # fmt: skip
    return outbox.Queued(item.id, "card_edit", outbox.OPERATORS, edit.to_json())


def decision_rows(
    pipeline: spec.Pipeline, decision: Decision, version: int, operator_id: int,
    choice: decisions.Choice, reason: str | None, actor: str | None, now: datetime,
) -> list[outbox.Queued]:  # fmt: skip
    """What a decision that counts queues with it (`decision` as it will be): the card's
    edit (its status line) and, for an approval, the dispatch, held back through the undo
    window."""
    window = pipeline.approval.undo_window
    until = now + window if window and decision.outcome != "pending" else None
    who = _who(decision, operator_id, actor)
    status = _status_line(decision, pipeline, who, reason, until, now)
    decided_by = decision.approvals if choice == "approve" else (operator_id,)
    queued = [
        card_edit_row(pipeline, decision.item, version, status, decided_by=decided_by,
                      undo_until=until),
    ]  # fmt: skip
    if decision.outcome == "approved":
        item_id, attempt = decision.item.id, decision.item.attempt
        dispatch = payloads.Dispatch(item_id, attempt, version, pipeline.name).to_json()
        key = decisions.dispatch_key(item_id, attempt, version)
        queued.append(
            outbox.Queued(item_id, "dispatch", pipeline.name, dispatch, key, not_before=until)
        )
    return queued


def _status_line(
    decision: Decision, pipeline: spec.Pipeline, who: str, reason: str | None,
    undo_until: datetime | None, now: datetime,
) -> str:  # fmt: skip
    at = units.when(now)
    if decision.outcome == "approved":
        line = f"✅ approved by {who} at {at}"
    elif decision.outcome == "rejected":
        line = f"❌ rejected by {who} at {at}" + (f": {reason}" if reason else "")
    else:  # a vote toward the quorum: everyone looking at the card sees who is in
        voters = ", ".join(decisions.voter(o) for o in decision.approvals)
        return f"✅ {voters} · {awaited(decision, pipeline)}"
    if undo_until is not None:
        action = "sends" if decision.outcome == "approved" else "final"
        line += f"\n↩️ Undo until {units.time_of_day(undo_until)} ({action} then)"
    return line


def _who(decision: Decision, operator_id: int, actor: str | None) -> str:
    """Who decided, as actors ("operator:1001", "cli:ana"): the bot shows names for them."""
    if decision.outcome == "approved":
        named = [
            actor if o == operator_id and actor else decisions.voter(o) for o in decision.approvals
        ]
        return ", ".join(named)
    return actor or events.operator(operator_id)


def awaited(decision: Decision, pipeline: spec.Pipeline) -> str:
    """Who the quorum still waits for: "waiting for operator:2", "waiting for 1 more of
    operator:2, operator:3" (those who may approve and have not), "waiting for 1 more";
    when too few may approve the version, what the card says instead (quorum.shortfall).
    """
    found = decision.reach
    if found is None:  # a bare decision (no pipeline at hand when it was taken)
        found = quorum.of(pipeline.approval, voted=decision.approvals)
    if found.short:
        return quorum.shortfall(found)
    more = decision.quorum - len(decision.approvals)
    left = found.waiting or ()
    names = quorum.names(left)
    if not left:
        return f"waiting for {more} more"
    return f"waiting for {names}" if len(left) == more else f"waiting for {more} more of {names}"
