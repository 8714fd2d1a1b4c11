"""Operator actions beyond one tap: a reject with its reason, undo, redraft with a note,
and decisions on a listed set of items. Telegram and the CLI call these alike.

    shown = followups.Shown(item_id, attempt, version)   # what the card showed
    await review.reject(store, pipeline, shown, 1001, "off-topic", now)
    await review.undo(store, pipeline, shown, 1001, now)
    item = await review.extend(store, pipeline, shown, 1001, now)
    asked = review.Redraft(item_id, 1, "shorter", 1001, actor)
    await review.redraft(store, pipeline, asked, now, scheduler=s)
    listed = await review.offer(store, "news", now)         # what /pending lists, bound
    vote = review.ListedVote(listed.offer.id, 1001, "approve")
    result = await review.decide_listed(store, pipelines, vote, now)

Each change is one unit with its event and the outbox rows that must follow it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pipelines.approval import card_edits, flow, rule
from pipelines.text import validation
from store import backend, errors, items, units
from store.audit import events
from store.db import Store
from store.intake import timetable
from store.items import Item
from store.items.machine import State
from store.ledger import outputs as llm_outputs
from store.review import deadlines, decisions, followups

if TYPE_CHECKING:
    from pipelines.config import spec
    from pipelines.service.scheduler import Scheduler

#: The longest reject reason or redraft note an operator may type (characters).
MAX_TEXT = 300
#: Items one listed decision covers at most (what /pending shows).
MAX_LISTED = 50
#: States a Redraft starts from: the reviewer said no, or nobody answered in time.
REDRAFTABLE = frozenset({State.REJECTED, State.EXPIRED})


class Refused(errors.Conflict):
    """The action does not apply here; the message says why."""


def operator_text(text: str, what: str) -> str:
    """Typed text cleaned of control and invisible characters; Refused when empty."""
    cleaned = validation.clean(text, MAX_TEXT).strip()
    if not cleaned:
        raise Refused(f"the {what} is empty; type a few words")
    return cleaned


async def reject(
    store: Store,
    pipeline: spec.Pipeline,
    shown: followups.Shown,
    operator_id: int,
    reason: str,
    now: datetime,
) -> rule.Decision:
    """Reject the version shown, with the reason in the event and on the card."""
    why = operator_text(reason, "reason")
    return await flow.decide(store, pipeline, rule.Vote(shown, operator_id, "reject", why), now)


async def undo(
    store: Store,
    pipeline: spec.Pipeline,
    shown: followups.Shown,
    operator_id: int,
    now: datetime,
) -> Item:
    """Take back an approval (before it is sent) or a reject within the undo window."""
    window = pipeline.approval.undo_window
    if not window:
        raise Refused(f"undo is off for {pipeline.name} (approval.undo_window: 0s)")

    def unit(conn: backend.Conn) -> Item:
        moved = decisions.undo_sync(
            conn,
            *shown,
            operator_id,
            now,
            window=window,
            deadline=pipeline.approval.window,
        )
        who = events.operator(operator_id)
        at = units.time_of_day(now)
        status = f"↩️ undone by {who} at {at}: awaiting a decision again"
        card_edits.edit_card_sync(conn, pipeline, moved, status, now)
        return moved

    return await store.write(unit)


async def extend(
    store: Store, pipeline: spec.Pipeline, shown: followups.Shown, operator_id: int, now: datetime
) -> Item:
    """Give a waiting item its pipeline's approval window once more (Extend on a warning)."""
    window = pipeline.approval.window
    most = pipeline.approval.max_extensions
    if not most:
        raise Refused(f"extending is off for {pipeline.name} (approval.max_extensions: 0)")
    who = events.operator(operator_id)

    def unit(conn: backend.Conn) -> Item:
        item = deadlines.extend_sync(conn, shown, deadlines.Extension(window, most), who, now)
        assert item.deadline is not None
        until = units.when(item.deadline)
        status = f"⏳ window extended by {units.duration(window)} by {who}: open until {until}"
        card_edits.edit_card_sync(conn, pipeline, item, status, now)
        return item

    return await store.write(unit)


@dataclass(frozen=True)
class Redraft:
    """A reviewer's ask to draft an item's attempt again, with a note for the drafter;
    `actor` names them in the events."""

    item_id: int
    attempt: int
    note: str
    operator_id: int
    actor: str


async def redraft(
    store: Store,
    pipeline: spec.Pipeline,
    asked: Redraft,
    now: datetime,
    *,
    scheduler: Scheduler | None = None,
) -> Item:
    """Draft a rejected or expired item again (a new attempt, through the ledger), with
    the reviewer's note given to the LLM drafter as an instruction."""
    if pipeline.draft.drafter != "llm":
        raise Refused(f"{pipeline.name} drafts from a template: a note cannot change it")
    text = operator_text(asked.note, "note")
    item_id, attempt, actor = asked.item_id, asked.attempt, asked.actor

    def unit(conn: backend.Conn) -> Item:
        flow.check_operator(pipeline, asked.operator_id, conn, (item_id, attempt))
        item = items.lock_sync(conn, item_id)
        if item.attempt != attempt or item.state not in REDRAFTABLE:
            raise Refused(
                f"item {item_id} is {item.state} at attempt {item.attempt}: only a rejected "
                "or expired draft can be redrafted from its card"
            )
        why = f"redraft asked by {actor}: {text}"
        replayed = items.apply_one(conn, items.Move(item, State.NEW, actor, now, why, way="replay"))
        followups.keep_note_sync(conn, item_id, replayed.attempt, text, actor, now)
        # The note must reach a model: an answer kept from before would skip the call.
        llm_outputs.refuse_unshown_sync(conn, item_id, "a redraft with a note was asked")
        # The old card names its attempt; the item's state (new) leaves it no buttons.
        status = f"🔄 redraft asked by {actor}: {text}"
        old_card = replace(item, state=replayed.state)
        card_edits.edit_card_sync(conn, pipeline, old_card, status, now)
        return replayed

    replayed = await store.write(unit)
    await ask_run(store, replayed.pipeline, now, scheduler)
    return replayed


async def ask_run(
    store: Store, name: str, now: datetime, scheduler: Scheduler | None = None
) -> None:
    """Run a pipeline soon: at once in this process, or (from the CLI writing directly)
    by a persisted request the bot takes at its next start."""
    if scheduler is not None and name in scheduler.pipelines:
        await scheduler.trigger(name, now)
    else:
        await timetable.request_run(store, name, now)


# -- from a terminal ---------------------------------------------------------------------

TerminalAction = Literal["approve", "reject", "edit", "redraft", "remove-image"]
TERMINAL_ACTIONS: tuple[TerminalAction, ...] = (
    "approve",
    "reject",
    "edit",
    "redraft",
    "remove-image",
)


@dataclass(frozen=True)
class Typed:
    """An action typed at a terminal: `actor` (the Unix user) names who in the events;
    `version` is the one the operator read (None: the current one); `text` is the reason,
    the new text or the note."""

    action: str
    item_id: int
    actor: str
    version: int | None = None
    text: str = ""


@dataclass(frozen=True)
class Decided:
    """What a terminal's action left: the item, and what it did in words (a vote toward
    a quorum says how many are in and who is awaited; people as `operator:<id>`)."""

    item: Item
    said: str


async def at_terminal(
    store: Store,
    pipelines: Mapping[str, spec.Pipeline],
    typed: Typed,
    now: datetime,
    *,
    scheduler: Scheduler | None = None,
) -> Decided:
    """approve / reject / edit / redraft from the CLI, voting as decisions.TERMINAL with
    the typed actor in the events."""
    action, item_id, actor, text = typed.action, typed.item_id, typed.actor, typed.text
    item = await items.get(store, item_id)
    pipeline = pipelines.get(item.pipeline)
    if pipeline is None:
        raise Refused(f"pipeline {item.pipeline} is not loaded")
    shown = item.version if typed.version is None else typed.version
    voter = decisions.TERMINAL
    revision = flow.Revision(item_id, shown, voter, actor)
    if action == "edit":
        draft = await flow.edit(store, pipeline, revision, text, now)
        return Decided(await items.get(store, item_id), f"edited: version {draft.version}")
    if action == "remove-image":
        draft = await flow.remove_image(store, pipeline, revision, now)
        return Decided(await items.get(store, item_id), f"image removed: version {draft.version}")
    if action == "redraft":
        asked = Redraft(item_id, item.attempt, text, voter, actor)
        again = await redraft(store, pipeline, asked, now, scheduler=scheduler)
        return Decided(again, "redrafting with your note")
    if action not in ("approve", "reject"):
        raise Refused(f"unknown action {action!r}; valid: {', '.join(TERMINAL_ACTIONS)}")
    reason = operator_text(text, "reason") if text.strip() else None
    choice: decisions.Choice = "approve" if action == "approve" else "reject"
    card = followups.Shown(item_id, item.attempt, shown)
    vote = rule.Vote(card, voter, choice, reason, actor)
    decision = await flow.decide(store, pipeline, vote, now)
    if decision.outcome == "unchanged" and not flow.repeat_vote(decision, voter):
        raise Refused(f"nothing changed: item {item_id} is {decision.item.state}")
    return Decided(decision.item, flow.vote_words(decision, pipeline, voter))


# -- decisions on a listed set ----------------------------------------------------------


@dataclass(frozen=True)
class Listed:
    offer: followups.Offer
    items: list[Item]


@dataclass(frozen=True)
class ListedResult:
    choice: decisions.Choice
    #: Items the decision moved (approved or rejected).
    decided: list[int]
    #: (item id, where its quorum stands) for items that took a vote and still wait:
    #: "1 of 2; waiting for operator:1002". A vote is not a decision.
    voted: list[tuple[int, str]]
    #: (item id, why nothing changed) for the others.
    refused: list[tuple[int, str]]
    #: The pipeline the list was of (None: all of them).
    pipeline: str | None = None

    @property
    def changed(self) -> list[int]:
        """Items whose card changes: those decided and those that took a vote."""
        return self.decided + [item_id for item_id, _ in self.voted]


async def offer(
    store: Store, pipeline: str | None, now: datetime, limit: int = MAX_LISTED
) -> Listed:
    """What awaits approval (one pipeline or all), newest version each, as a list that
    a bulk decision can later be bound to."""
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, pipeline, limit=limit)
    listed = [(item.id, item.attempt, item.version) for item in waiting]
    return Listed(await followups.offer(store, pipeline, listed, now), waiting)


@dataclass(frozen=True)
class ListedVote:
    """One operator's decision on every version a list showed (its offer); `actor` names
    them in the events (default: the Telegram operator `operator_id`)."""

    offer_id: int
    operator_id: int
    choice: decisions.Choice
    actor: str | None = None


async def decide_listed(
    store: Store, pipelines: Mapping[str, spec.Pipeline], vote: ListedVote, now: datetime
) -> ListedResult:
    """Apply one decision to exactly the versions listed; one event per item moved.

    The list is closed first, so a second confirmation decides nothing. An item that
    moved on since it was listed (a new version, decided meanwhile) is refused with
    its reason; the others go ahead, each in its own unit.
    """
    listed = await followups.get_offer(store, vote.offer_id, now)
    await store.write(followups.close_offer_sync, vote.offer_id, now)
    decided: list[int] = []
    voted: list[tuple[int, str]] = []
    refused: list[tuple[int, str]] = []
    choice = vote.choice
    reason = "rejected with the whole list" if choice == "reject" else None
    for item_id, attempt, version in listed.items:
        try:
            item = await items.get(store, item_id)
            pipeline = pipelines.get(item.pipeline)
            if pipeline is None:
                raise Refused(f"pipeline {item.pipeline} is no longer configured")
            shown = followups.Shown(item_id, attempt, version)
            one = rule.Vote(shown, vote.operator_id, choice, reason, vote.actor)
            decision = await flow.decide(store, pipeline, one, now)
        except (
            errors.Conflict,
            errors.IllegalTransition,
            errors.NotFound,
            flow.NotAllowed,
            flow.BlockTell,
        ) as exc:
            refused.append((item_id, str(exc)))
            continue
        if decision.outcome == "unchanged":
            refused.append((item_id, f"nothing changed: it is {decision.item.state}"))
        elif decision.outcome == "pending":
            stands = f"{len(decision.approvals)} of {decision.quorum}"
            voted.append((item_id, f"{stands}; {card_edits.awaited(decision, pipeline)}"))
        else:
            decided.append(item_id)
    return ListedResult(choice, decided, voted, refused, listed.pipeline)
