"""The approval step: cards in the outbox, operator decisions and edits.

The Telegram handlers and the CLI both call these; each call is one transaction
holding the vote or the new draft, the transition it causes, and the outbox rows
(card edit, new card, dispatch) that must follow it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pipelines.approval import card_edits, quorum, rule
from pipelines.approval.rule import Decision
from pipelines.config import voice
from pipelines.text import similarity, validation
from pipelines.voice import lint, sidecar
from store import backend, drafts, errors, items, outbox, payloads
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


class BlockTell(errors.Refused):
    """The version has a block tell: one tap does not approve it (Approve anyway does)."""


def reach_sync(
    conn: backend.Conn, pipeline: spec.Pipeline, item: Item, voted: Sequence[int] = (),
    draft: Draft | None = None,
) -> quorum.Reach:  # fmt: skip
    """Who may approve the item's current version (`draft`, read when not given)."""
    found = _version_sync(conn, item, draft)
    return quorum.of(pipeline.approval, author=found.author, voted=voted, escalated=found.escalated)


def _version_sync(conn: backend.Conn, item: Item, draft: Draft | None = None) -> quorum.Version:
    """Who wrote the item's current version: the operator of an edit (then its escalation
    is read from its follow-ups), or a drafter."""
    draft = draft or drafts.get_sync(conn, item.id, item.version)
    author = draft.provenance.get("operator")
    if not isinstance(author, int):
        # A drafter's version: everyone listed may approve it, escalated or not.
        return quorum.Version()
    return quorum.Version(author, followups.nudged_sync(conn, item.id, item.attempt, "escalate"))


async def reach(store: Store, pipeline: spec.Pipeline, item: Item) -> quorum.Reach:
    """Who may approve the item's current version now, with the votes it has."""

    def read(conn: backend.Conn) -> quorum.Reach:
        return reach_sync(conn, pipeline, item, decisions.approvals_sync(conn, item))

    return await store.read(read)


@dataclass(frozen=True)
class Card:
    """An approval card: the draft version it shows, the `note` it shows it with, the
    item approved recently it may `duplicate`, and `chats` for a copy to those chats
    alone (an escalation)."""

    draft: Draft
    note: str | None = None
    duplicate: similarity.Earlier | None = None
    chats: Sequence[int] = ()


def queue_card(
    conn: backend.Conn, pipeline: spec.Pipeline, item: Item, card: Card, now: datetime
) -> int | None:
    """Queue the approval card for one draft version (at most once per version, and
    once per set of chats)."""
    return outbox.put_sync(conn, card_row(conn, pipeline, item, card), now)


def card_row(conn: backend.Conn, pipeline: spec.Pipeline, item: Item, card: Card) -> outbox.Queued:
    """The outbox row of `queue_card`, to queue with the move to approval or alone."""
    draft, duplicate, chats = card.draft, card.duplicate, card.chats
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
        "tells": sidecar.line(draft.tells),
        "note": card.note,
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


def repeat_vote(decision: Decision, voter: int) -> bool:
    """Whether nothing changed because `voter` already approved this waiting version."""
    waiting = decision.item.state == State.AWAITING_APPROVAL
    return decision.outcome == "unchanged" and waiting and voter in decision.approvals


def vote_words(decision: Decision, pipeline: spec.Pipeline, voter: int) -> str:
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
    tail = card_edits.awaited(decision, pipeline)
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


async def decide(store: Store, pipeline: spec.Pipeline, vote: rule.Vote, now: datetime) -> Decision:
    """Record one operator's decision on the version their card showed.

    An approval's dispatch waits out the pipeline's undo window, and the card says
    until when; `vote.reason` goes with a reject into its event and onto the card.
    """
    return await store.write(decide_sync, vote, now, pipeline=pipeline)


def decide_sync(
    conn: backend.Conn, vote: rule.Vote, now: datetime, *, quorum: int = 1,
    pipeline: spec.Pipeline | None = None,
) -> Decision:  # fmt: skip
    """One decision inside the caller's unit (which may add its own rows): the item
    locked, the vote recorded, rule.judge asked, and the move it decides made with its
    rows, so fifty simultaneous taps produce exactly one transition.

    `await store.write(flow.decide_sync, rule.Vote(shown, operator, "approve"), now)`

    With `pipeline`, its approvers and rules apply (four eyes too) and the card's edit
    and the dispatch go with the vote; without, a bare vote: `quorum` approvals approve.
    """
    if pipeline is not None:
        check_operator(pipeline, vote.operator_id, conn, (vote.shown.item_id, vote.shown.attempt))
    if vote.choice not in ("approve", "reject"):
        raise ValueError(f"unknown decision {vote.choice!r}; valid: approve, reject")
    rules = _rules(pipeline, quorum)
    item, tells = decisions.shown_with_tells_sync(conn, *vote.shown)
    if pipeline is not None and vote.choice == "approve":
        _check_tells_sync(conn, item, tells, vote, now)
    ballot = _cast_sync(conn, item, vote, now)
    verdict = _judged_sync(conn, rules, item, ballot, asks=pipeline is not None)
    assert verdict.outcome != "refused"  # _judged_sync raised
    decision = Decision(item, verdict.outcome, ballot.approvals, rules.quorum, verdict.reach)
    if verdict.outcome == "unchanged":
        return decision
    if verdict.to is None:  # a vote toward the quorum: the card says who is in
        for row in _rows(pipeline, decision, vote, now):
            outbox.put_sync(conn, row, now)
        return decision
    # The rows are asked for with the item as the move leaves it, and written by the move.
    ahead = replace(decision, item=replace(item, state=verdict.to, reason=verdict.reason))
    rows = tuple(_rows(pipeline, ahead, vote, now))
    move = items.Move(item, verdict.to, vote.who, now, verdict.reason, effects=rows)
    return replace(decision, item=items.apply_one(conn, move))


def _check_tells_sync(
    conn: backend.Conn, item: Item, kept: dict[str, Any] | None, vote: rule.Vote, now: datetime
) -> None:
    """BlockTell when the version waiting for approval has a block tell (`kept`) and the
    vote is not Approve anyway; an Approve anyway past one is an event of its own, in the
    same unit."""
    if item.state != State.AWAITING_APPROVAL or not sidecar.blocked(kept):
        return
    said = sidecar.line(kept)
    if not vote.anyway:
        raise BlockTell(
            f"version {item.version} of item {item.id} has a block tell ({said}): edit it, "
            "or tap Approve anyway on its card to approve it as it is"
        )
    reason = f"approve anyway past the block tells of version {item.version}: {said}"
    state, attempt = item.state, item.attempt
    events.append(
        conn, "item", item.id, state, state, vote.who, now, attempt=attempt, reason=reason
    )


def _rules(pipeline: spec.Pipeline | None, need: int) -> quorum.Rules:
    """The pipeline's approval rule; without a pipeline, a bare vote's: `need` approve."""
    return quorum.Rules.of(pipeline.approval) if pipeline else quorum.Rules(need)


def _judged_sync(
    conn: backend.Conn, rules: quorum.Rules, item: Item, ballot: rule.Ballot, *, asks: bool
) -> rule.Verdict:
    """rule.judge's verdict, with who wrote the version when it matters (and `asks`: a
    bare vote never reads it); WroteThisVersion when four eyes refuses the vote, which
    rolls the unit back, the vote with it."""
    version = _version_sync(conn, item) if asks and rule.asks_version(rules, ballot) else None
    verdict = rule.judge(rules, ballot, version)
    if verdict.outcome == "refused":
        raise WroteThisVersion(
            f"you wrote version {item.version} of item {item.id}: another approver must "
            "approve it (four eyes: approval.separate_editor)"
        )
    return verdict


def _cast_sync(conn: backend.Conn, item: Item, vote: rule.Vote, now: datetime) -> rule.Ballot:
    """The vote, recorded while the item waits; what the store answered to it."""
    choice, voter, actor, reason = vote.choice, vote.operator_id, vote.actor, vote.reason
    if item.state != State.AWAITING_APPROVAL:
        approvals = decisions.approvals_sync(conn, item)
        return rule.Ballot(choice, voter, approvals, False, False, actor, reason)
    cast = decisions.vote_sync(conn, item, voter, choice, now)
    if cast is None:  # this operator already voted on it
        approvals = decisions.approvals_sync(conn, item)
        return rule.Ballot(choice, voter, approvals, False, True, actor, reason)
    return rule.Ballot(choice, voter, cast, True, True, actor, reason)


def _rows(
    pipeline: spec.Pipeline | None, decision: Decision, vote: rule.Vote, now: datetime
) -> list[outbox.Queued]:
    if pipeline is None:
        return []
    return card_edits.decision_rows(pipeline, decision, vote, now)


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


@dataclass(frozen=True)
class Revision:
    """Who writes a new version of a draft, and of which version, as their card showed it;
    `actor` names them in the events (default: the Telegram operator `operator_id`)."""

    item_id: int
    shown_version: int
    operator_id: int
    actor: str | None = None

    @property
    def who(self) -> str:
        return self.actor or events.operator(self.operator_id)


async def edit(
    store: Store, pipeline: spec.Pipeline, revision: Revision, text: str, now: datetime
) -> Draft:
    """An operator's replacement text: validated like any draft, its tells found (off the
    store's thread), then a new card."""
    validation.validate(text, pipeline.draft.output_schema)
    tells = sidecar.of(lint.lint(text, voice.rules_of(pipeline.voice)))
    new = drafts.Body(text, {}, tells=tells)
    return await store.write(_revise_sync, pipeline, revision, now, new)


async def remove_image(
    store: Store, pipeline: spec.Pipeline, revision: Revision, now: datetime
) -> Draft:
    """The shown version without its image, as a new version with a new card (an edit:
    audited with its actor, and the older card's buttons stop working)."""
    return await store.write(_revise_sync, pipeline, revision, now, None)


def _revise_sync(
    conn: backend.Conn, pipeline: spec.Pipeline, revision: Revision, now: datetime,
    new: drafts.Body | None,
) -> Draft:  # fmt: skip
    """An operator's new version: the text (and tells) replaced by `new`'s, or (None) the
    image taken off. The shown card says so and a new card follows, in the same unit."""
    item_id, shown_version = revision.item_id, revision.shown_version
    operator_id, who = revision.operator_id, revision.who
    check_operator(pipeline, operator_id, conn, (item_id, items.get_sync(conn, item_id).attempt))
    edit = drafts.Edit(item_id, shown_version, operator_id, who)
    if new is None:
        draft = drafts.remove_image_sync(conn, edit, now)
        mark, done = "🖼", "image removed"
    else:
        draft = drafts.edit_sync(conn, edit, new.text, now, new.tells)
        mark, done = "✏️", "edited"
    item = items.get_sync(conn, item_id)
    status = f"{mark} {done} by {who}: see version {draft.version} below"
    # The edit is of the card that showed the older version.
    card_edits.edit_card_sync(conn, pipeline, replace(item, version=shown_version), status, now)
    queue_card(conn, pipeline, item, Card(draft, note=f"{done} by {who}"), now)
    return draft
