"""The rows a decision queues with it: the card's edit (its status line) and, for an
approval, the dispatch, held back through the undo window.

    rows = card_edits.decision_rows(pipeline, decision, vote, now)

Also the card edits of an operator's new version, and the words a card uses for who
the quorum still waits for.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from pipelines.approval import quorum
from pipelines.approval.rule import Decision, Vote
from store import backend, outbox, payloads, units
from store.items import Item
from store.review import decisions

if TYPE_CHECKING:
    from pipelines.config import spec


def edit_card_sync(
    conn: backend.Conn, pipeline: spec.Pipeline, item: Item, status: str, now: datetime
) -> None:
    """Queue the edit of the card showing the item's version and attempt: its status line
    and, from the item's state, which buttons it keeps."""
    outbox.put_sync(conn, card_edit_row(pipeline, item, status), now)


def card_edit_row(
    pipeline: spec.Pipeline, item: Item, status: str, *, decided_by: Sequence[int] = (),
    undo_until: datetime | None = None,
) -> outbox.Queued:  # fmt: skip
    """The outbox row of `edit_card_sync`, to queue with a move or alone; a decision's
    says who decided and until when its undo (the only button then) works."""
    edit = payloads.CardEdit(
        item.id, item.attempt, item.version, item.state.value, status, tuple(decided_by),
        undo_until=undo_until.isoformat() if undo_until else None, pipeline=pipeline.name,
    )  # fmt: skip
    return outbox.Queued(item.id, "card_edit", outbox.OPERATORS, edit.to_json())


def decision_rows(
    pipeline: spec.Pipeline, decision: Decision, vote: Vote, now: datetime
) -> list[outbox.Queued]:
    """What a decision that counts queues with it (`decision` as it will be): the card's
    edit (its status line) and, for an approval, the dispatch, held back through the undo
    window."""
    window = pipeline.approval.undo_window
    until = now + window if window and decision.outcome != "pending" else None
    status = _status_line(decision, pipeline, vote, until, now)
    decided_by = decision.approvals if vote.choice == "approve" else (vote.operator_id,)
    version = decision.item.version
    queued = [
        card_edit_row(pipeline, decision.item, status, decided_by=decided_by, undo_until=until)
    ]
    if decision.outcome == "approved":
        item_id, attempt = decision.item.id, decision.item.attempt
        dispatch = payloads.Dispatch(item_id, attempt, version, pipeline.name).to_json()
        key = decisions.dispatch_key(item_id, attempt, version)
        queued.append(
            outbox.Queued(item_id, "dispatch", pipeline.name, dispatch, key, not_before=until)
        )
    return queued


def _status_line(
    decision: Decision, pipeline: spec.Pipeline, vote: Vote, undo_until: datetime | None,
    now: datetime,
) -> str:  # fmt: skip
    at, who, reason = units.when(now), _who(decision, vote), vote.reason
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


def _who(decision: Decision, vote: Vote) -> str:
    """Who decided, as actors ("operator:1001", "cli:ana"): the bot shows names for them."""
    if decision.outcome == "approved":
        actor = vote.actor
        named = [
            actor if o == vote.operator_id and actor else decisions.voter(o)
            for o in decision.approvals
        ]
        return ", ".join(named)
    return vote.who


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
