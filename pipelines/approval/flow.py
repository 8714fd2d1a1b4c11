"""The approval step: cards in the outbox, operator decisions and edits.

The Telegram handlers and the CLI both call these; each call is one transaction
holding the vote or the new draft, the transition it causes, and the outbox rows
(card edit, new card, dispatch) that must follow it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipelines.approval import quorum
from pipelines.text import similarity, validation
from store import backend, drafts, errors, items, outbox, payloads, units
from store.audit import events
from store.db import Store
from store.drafts import Draft
from store.items import Item
from store.items.machine import State
from store.review import decisions, followups

if TYPE_CHECKING:
    from pipelines.config import spec


class NotAllowed(errors.Refused):
    """This operator may not decide on this pipeline's drafts."""


class WroteThisVersion(errors.Conflict):
    """Four eyes: the operator who wrote a draft version may not approve it."""


@dataclass(frozen=True)
class Vote(decisions.Decision):
    """A decision and who may still approve the version it was on."""

    reach: quorum.Reach | None = None


def reach_of(decision: decisions.Decision, pipeline: spec.Pipeline) -> quorum.Reach:
    """Who may approve the decided version (as `decide` found it)."""
    if isinstance(decision, Vote) and decision.reach is not None:
        return decision.reach
    return quorum.of(pipeline.approval, voted=decision.approvals)


def reach_sync(
    conn: backend.Conn, pipeline: spec.Pipeline, item: Item, voted: Sequence[int] = (),
    draft: Draft | None = None,
) -> quorum.Reach:  # fmt: skip
    """Who may approve the item's current version (`draft`, read when not given): its
    author is the operator who wrote it (an edit); its escalation is read from its
    follow-ups."""
    draft = draft or drafts.get_sync(conn, item.id, item.version)
    author = draft.provenance.get("operator")
    if not isinstance(author, int):
        # A drafter's version: everyone listed may approve it, escalated or not.
        return quorum.of(pipeline.approval, voted=voted)
    escalated = followups.nudged_sync(conn, item.id, item.attempt, "escalate")
    return quorum.of(pipeline.approval, author=author, voted=voted, escalated=escalated)


async def reach(store: Store, pipeline: spec.Pipeline, item: Item) -> quorum.Reach:
    """Who may approve the item's current version now, with the votes it has."""

    def read(conn: backend.Conn) -> quorum.Reach:
        return reach_sync(conn, pipeline, item, decisions.approvals_sync(conn, item))

    return await store.read(read)


def queue_card(
    conn: backend.Conn,
    pipeline: spec.Pipeline,
    item: Item,
    draft: Draft,
    now: datetime,
    *,
    note: str | None = None,
    duplicate: similarity.Earlier | None = None,
    chats: Sequence[int] = (),
) -> int | None:
    """Queue the approval card for one draft version (at most once per version); with
    `chats`, a copy for those chats alone (an escalation)."""
    card = card_row(conn, pipeline, item, draft, note=note, duplicate=duplicate, chats=chats)
    return outbox.put_sync(conn, card, now)


def card_row(
    conn: backend.Conn,
    pipeline: spec.Pipeline,
    item: Item,
    draft: Draft,
    *,
    note: str | None = None,
    duplicate: similarity.Earlier | None = None,
    chats: Sequence[int] = (),
) -> outbox.Queued:
    """The outbox row of `queue_card`, to queue with the move to approval or alone."""
    payload: dict[str, Any] = {
        "pipeline": pipeline.name,
        "title": item.payload.get("title", ""),
        "link": item.payload.get("link"),
        "image_url": draft.image_url,
        # No "text": readers of the card join its draft row (store.outbox).
        "attempt": item.attempt,
        "version": draft.version,
        "drafter": draft.provenance.get(
            "drafter", "operator" if "operator" in draft.provenance else "?"
        ),
        "cost_micros": draft.cost_micros,
        "note": note,
        "quorum": pipeline.approval.quorum,
        **_shortfall(reach_sync(conn, pipeline, item, draft=draft)),
        "duplicate_of": duplicate.item_id if duplicate else None,
        "duplicate_reason": "similar to an item approved recently" if duplicate else None,
    }
    key = f"card:{item.id}:{item.attempt}:{draft.version}"
    if chats:
        payload["chats"] = list(chats)
        key += ":" + ",".join(map(str, chats))
    return outbox.Queued(item.id, "card", outbox.OPERATORS, payload, key)


def _shortfall(found: quorum.Reach) -> dict[str, Any]:
    """The card's warning when too few may approve its version, and whether it offers
    Escalate; nothing when enough may."""
    if not found.short:
        return {}
    escalate = payloads.ESCALATE_BUTTONS if found.can_escalate else ""
    return {"short_of": quorum.shortfall(found), "buttons": escalate}


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


def _status_line(
    decision: decisions.Decision, pipeline: spec.Pipeline, who: str, reason: str | None,
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


def awaited(decision: decisions.Decision, pipeline: spec.Pipeline) -> str:
    """Who the quorum still waits for: "waiting for operator:2", "waiting for 1 more of
    operator:2, operator:3" (those who may approve and have not), "waiting for 1 more";
    when too few may approve the version, what the card says instead (quorum.shortfall).
    """
    found = reach_of(decision, pipeline)
    if found.short:
        return quorum.shortfall(found)
    more = decision.quorum - len(decision.approvals)
    left = found.waiting or ()
    names = quorum.names(left)
    if not left:
        return f"waiting for {more} more"
    return f"waiting for {names}" if len(left) == more else f"waiting for {more} more of {names}"


def repeat_vote(decision: decisions.Decision, voter: int) -> bool:
    """Whether nothing changed because `voter` already approved this waiting version."""
    waiting = decision.item.state == State.AWAITING_APPROVAL
    return decision.outcome == "unchanged" and waiting and voter in decision.approvals


def vote_words(decision: decisions.Decision, pipeline: spec.Pipeline, voter: int) -> str:
    """What one vote did, for whoever cast it: "your vote is in: 1 of 2 (waiting for
    operator:1002)", "you already approved this version". People are `operator:<id>`;
    the bot and the CLI show their names."""
    if decision.outcome == "approved":
        return "✅ approved"
    if decision.outcome == "rejected":
        return "❌ rejected"
    if decision.outcome == "unchanged" and not repeat_vote(decision, voter):
        return f"nothing changed: the item is {decision.item.state.replace('_', ' ')}"
    votes = f"{len(decision.approvals)} of {decision.quorum}"
    tail = awaited(decision, pipeline)
    if decision.outcome == "pending":
        return f"your vote is in: {votes} ({tail})"
    return f"you already approved this version: {votes} ({tail})"


def check_operator(
    pipeline: spec.Pipeline, operator_id: int, conn: backend.Conn | None = None,
    item: tuple[int, int] | None = None,
) -> None:  # fmt: skip
    """NotAllowed unless the operator approves this pipeline, or was brought in by the
    escalation of this item's attempt (`item`, read on `conn`)."""
    allowed = pipeline.approval.operators
    if not allowed or operator_id in allowed or operator_id == decisions.TERMINAL:
        return
    brought_in = operator_id in pipeline.approval.escalate_to
    if brought_in and conn and item and followups.nudged_sync(conn, *item, "escalate"):
        return
    raise NotAllowed(
        f"you are not an approver here: operator {operator_id} is not among "
        f"{pipeline.name}'s approvers"
    )


def _who(decision: decisions.Decision, operator_id: int, actor: str | None) -> str:
    """Who decided, as actors ("operator:1001", "cli:ana"): the bot shows names for them."""
    if decision.outcome == "approved":
        named = [
            actor if o == operator_id and actor else decisions.voter(o) for o in decision.approvals
        ]
        return ", ".join(named)
    return actor or events.operator(operator_id)


async def decide(
    store: Store,
    pipeline: spec.Pipeline,
    item_id: int,
    attempt: int,
    version: int,
    operator_id: int,
    choice: decisions.Choice,
    now: datetime,
    *,
    reason: str | None = None,
    actor: str | None = None,
) -> decisions.Decision:
    """Record one operator's decision on the version their card showed.

    An approval's dispatch waits out the pipeline's undo window, and the card says
    until when; `reason` goes with a reject into its event and onto the card.
    """

    def unit(conn: backend.Conn) -> decisions.Decision:
        check_operator(pipeline, operator_id, conn, (item_id, attempt))
        if choice == "approve":
            _check_four_eyes(conn, pipeline, item_id, attempt, version, operator_id)
        found: list[quorum.Reach] = []

        def reach_now(voted: decisions.Decision) -> quorum.Reach:
            """Who may still approve (asked once): it matters only while the item waits."""
            if not found:
                found.append(reach_sync(conn, pipeline, voted.item, voted.approvals))
            return found[0]

        def rows(voted: decisions.Decision) -> list[outbox.Queued]:
            pending = voted.outcome == "pending"
            decision = Vote(*_fields(voted), reach_now(voted) if pending else None)
            return _decision_rows(pipeline, decision, version, operator_id, choice, reason,
                                  actor, now)  # fmt: skip

        voted = decisions.decide_sync(
            conn, item_id, attempt, version, operator_id, choice, now,
            quorum=pipeline.approval.quorum, reason=reason, actor=actor, queue=rows,
        )  # fmt: skip
        waiting = voted.outcome in ("pending", "unchanged")
        return Vote(*_fields(voted), reach_now(voted) if waiting else None)

    return await store.write(unit)


def _decision_rows(
    pipeline: spec.Pipeline, decision: Vote, version: int, operator_id: int,
    choice: decisions.Choice, reason: str | None, actor: str | None, now: datetime,
) -> list[outbox.Queued]:  # fmt: skip
    """What a decision that counts queues with it: the card's edit (its status line) and,
    for an approval, the dispatch, held back through the undo window."""
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


def _fields(
    decision: decisions.Decision,
) -> tuple[Item, decisions.Outcome, tuple[int, ...], int]:
    return decision.item, decision.outcome, decision.approvals, decision.quorum


def _check_four_eyes(
    conn: backend.Conn, pipeline: spec.Pipeline, item_id: int, attempt: int, version: int,
    operator_id: int,
) -> None:  # fmt: skip
    """WroteThisVersion when the operator wrote the version awaiting approval."""
    if not pipeline.approval.four_eyes:
        return
    item = items.lock_sync(conn, item_id)
    if (item.state, item.attempt, item.version) != (State.AWAITING_APPROVAL, attempt, version):
        return  # decide_sync answers a stale card or a decided item
    found = reach_sync(conn, pipeline, item)
    if operator_id in found.barred:
        raise WroteThisVersion(
            f"you wrote version {item.version} of item {item.id}: another approver must "
            "approve it (four eyes: approval.separate_editor)"
        )


#: Waiting items looked at per pipeline when the pipelines are loaded (longest-waiting first).
RECHECKED = 1_000


async def recheck(store: Store, pipelines: Mapping[str, spec.Pipeline], now: datetime) -> int:
    """At load: each waiting item whose shown version too few may approve under the rules
    as loaded now (an edit, a shorter approvers list) gets a card edit saying so, once per
    version and wording; returns how many were flagged."""
    flagged = 0
    for pipeline in pipelines.values():
        waiting = await items.in_state(store, State.AWAITING_APPROVAL, pipeline.name, RECHECKED)
        short = await store.read(_short_sync, pipeline, waiting)
        for item, found in short:
            flagged += await store.write(_flag_sync, pipeline, item, found, now)
    return flagged


def _short_sync(
    conn: backend.Conn, pipeline: spec.Pipeline, waiting: Sequence[Item]
) -> list[tuple[Item, quorum.Reach]]:
    found = [(item, reach_sync(conn, pipeline, item, decisions.approvals_sync(conn, item)))
             for item in waiting]  # fmt: skip
    return [(item, reach) for item, reach in found if reach.short]


def _flag_sync(
    conn: backend.Conn, pipeline: spec.Pipeline, item: Item, found: quorum.Reach,
    now: datetime,
) -> bool:  # fmt: skip
    locked = items.lock_sync(conn, item.id)  # decided or edited since it was read: leave it
    if (locked.state, locked.attempt, locked.version) != (item.state, item.attempt, item.version):
        return False
    status = "⚠️ " + quorum.shortfall(found)
    edit = payloads.CardEdit(
        item.id, item.attempt, item.version, item.state.value, status,
        buttons=_shortfall(found).get("buttons", ""), pipeline=pipeline.name,
    )  # fmt: skip
    digest = hashlib.sha256(status.encode()).hexdigest()[:16]
    key = f"short:{item.id}:{item.attempt}:{item.version}:{digest}"
    queued = outbox.enqueue_sync(
        conn, "card_edit", outbox.OPERATORS, edit.to_json(), now, item_id=item.id, dedupe_key=key
    )
    return queued is not None


async def edit(
    store: Store,
    pipeline: spec.Pipeline,
    item_id: int,
    shown_version: int,
    text: str,
    operator_id: int,
    now: datetime,
    *,
    actor: str | None = None,
) -> Draft:
    """An operator's replacement text: validated like any draft, then a new card."""
    validation.validate(text, pipeline.draft.output_schema)
    who = actor or events.operator(operator_id)
    return await store.write(
        _revise_sync, pipeline, item_id, shown_version, operator_id, now, who, text
    )


async def remove_image(
    store: Store, pipeline: spec.Pipeline, item_id: int, shown_version: int,
    operator_id: int, now: datetime, *, actor: str | None = None,
) -> Draft:  # fmt: skip
    """The shown version without its image, as a new version with a new card (an edit:
    audited with its actor, and the older card's buttons stop working)."""
    who = actor or events.operator(operator_id)
    return await store.write(
        _revise_sync, pipeline, item_id, shown_version, operator_id, now, who, None
    )


def _revise_sync(
    conn: backend.Conn, pipeline: spec.Pipeline, item_id: int, shown_version: int,
    operator_id: int, now: datetime, who: str, text: str | None,
) -> Draft:  # fmt: skip
    """An operator's new version: the text replaced by `text`, or (None) the image taken
    off. The shown card says so and a new card follows, in the same unit."""
    check_operator(pipeline, operator_id, conn, (item_id, items.get_sync(conn, item_id).attempt))
    if text is None:
        draft = drafts.remove_image_sync(conn, item_id, shown_version, operator_id, now, who)
        mark, done = "🖼", "image removed"
    else:
        draft = drafts.edit_sync(conn, item_id, shown_version, text, operator_id, now, who)
        mark, done = "✏️", "edited"
    item = items.get_sync(conn, item_id)
    status = f"{mark} {done} by {who}: see version {draft.version} below"
    edit_card_sync(conn, pipeline, item, shown_version, status, now)
    queue_card(conn, pipeline, item, draft, now, note=f"{done} by {who}")
    return draft
