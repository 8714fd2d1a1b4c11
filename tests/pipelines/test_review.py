"""Operator actions beyond one tap, on a real store: reject reasons, undo and its window,
four eyes, decisions on a listed set, redraft notes, reminders, escalation and digests."""

from __future__ import annotations

import re
import sqlite3
from datetime import datetime, timedelta
from typing import Any

import pytest

from pipelines.approval import flow, rule
from pipelines.config import spec
from pipelines.operations import review
from pipelines.service import nudges
from store import db, drafts, errors, items, outbox, payloads
from store.audit import events
from store.items.machine import State
from store.review import decisions, followups
from store.review.followups import Shown
from tests import snapshot

S = State
ALICE, BOB, CAROL = 11, 12, 13


def pipeline(**rules: Any) -> spec.Pipeline:
    return spec.Pipeline.model_validate(
        {
            "name": "news",
            "schedule": "1h",
            "sources": [{"type": "rss", "url": "http://127.0.0.1:9/feed.xml", "scope": "s"}],
            "approval": {"undo_window": "10s", **rules},
            "dispatch": {"type": "file", "path": "/tmp/never-written"},
        }
    )


async def awaiting(store: db.Store, now: datetime, source_id: str = "g1") -> items.Item:
    item = await store.write(items.create_sync, "news", "s", source_id, {"title": source_id}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)

    def unit(conn: sqlite3.Connection) -> items.Item:
        drafts.add_sync(conn, item.id, drafts.Body("draft text", {"drafter": "template"}), now)
        return items.transition_sync(conn, item.id, S.AWAITING_APPROVAL, "system", now)

    return await store.write(unit)


async def dispatch_rows(store: db.Store, item_id: int) -> list[outbox.Row]:
    return await outbox.for_item(store, item_id, "dispatch")


# -- reject with a reason, undo ----------------------------------------------------------


async def test_a_reason_goes_into_the_event_and_onto_the_card(
    store: db.Store, now: datetime
) -> None:
    p, item = pipeline(), await awaiting(store, now)
    await review.reject(store, p, Shown(item.id, 1, 1), ALICE, "  off\u200b-topic \n", now)
    moved = (await events.for_entity(store, "item", item.id))[-1]
    assert moved.reason == f"rejected by {events.operator(ALICE)}: off-topic"
    edit = (await outbox.for_item(store, item.id, "card_edit"))[0].payload
    assert (
        edit["status"].startswith(f"❌ rejected by operator:{ALICE} at ")
        and ": off-topic\n" in edit["status"]
    )
    with pytest.raises(review.Refused, match="reason is empty"):
        await review.reject(store, p, Shown(item.id, 1, 1), BOB, " \u200b ", now)


async def test_an_undone_approval_calls_off_its_dispatch_and_can_be_approved_again(
    store: db.Store, now: datetime
) -> None:
    p, item = pipeline(), await awaiting(store, now)
    await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), ALICE, "approve"), now)
    [held] = await dispatch_rows(store, item.id)
    assert held.next_attempt_at == now + timedelta(seconds=10)  # the dispatch waits
    assert await outbox.due(store, now, ["dispatch"]) == []

    with pytest.raises(errors.Conflict, match="only an operator who decided"):
        await review.undo(store, p, Shown(item.id, 1, 1), BOB, now)
    at = now + timedelta(seconds=9)
    undone = await review.undo(store, p, Shown(item.id, 1, 1), ALICE, at)
    why = f"approved undone by operator:{ALICE}"
    assert (undone.state, undone.version, undone.reason) == (S.AWAITING_APPROVAL, 1, why)
    assert undone.deadline == at + p.approval.window  # a fresh approval window
    # Its one event, in the item's own history: the move back, by whom, on which attempt.
    undo_event = (await events.for_entity(store, "item", item.id))[-1]
    assert (
        undo_event.from_state, undo_event.to_state, undo_event.actor, undo_event.attempt,
        undo_event.reason,
    ) == ("approved", "awaiting_approval", f"operator:{ALICE}", 1, why)  # fmt: skip
    [called_off] = await dispatch_rows(store, item.id)
    assert called_off.state == "failed" and called_off.dedupe_key is None
    assert called_off.last_error == f"undone by operator:{ALICE}"

    # The votes were forgotten: the same operator's approval counts again and dispatches.
    again = await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), ALICE, "approve"), now)
    assert again.outcome == "approved"
    assert [r.state for r in await dispatch_rows(store, item.id)] == ["pending", "failed"]


async def test_undo_after_the_window_or_once_sent_changes_nothing(
    store: db.Store, now: datetime
) -> None:
    p, item = pipeline(), await awaiting(store, now)
    await review.reject(store, p, Shown(item.id, 1, 1), ALICE, "tone", now)
    before = await snapshot.tables(store)
    closed = (now + timedelta(seconds=10)).strftime("%H:%M:%S")
    too_late = f"too late to undo: the window closed at {closed} UTC"
    with pytest.raises(errors.Conflict, match=f"^{re.escape(too_late)}$"):
        await review.undo(store, p, Shown(item.id, 1, 1), ALICE, now + timedelta(seconds=10))
    stale = (
        f"this card shows version 2 of attempt 1; item {item.id} is now at version 1 of attempt 1"
    )
    with pytest.raises(errors.Conflict, match=f"^{re.escape(stale)}$"):
        await review.undo(store, p, Shown(item.id, 1, 2), ALICE, now)
    assert await snapshot.tables(store) == before
    with pytest.raises(review.Refused, match="undo is off"):
        await review.undo(store, pipeline(undo_window="0s"), Shown(item.id, 1, 1), ALICE, now)

    other = await awaiting(store, now, "g2")
    await flow.decide(store, p, rule.Vote(Shown(other.id, 1, 1), ALICE, "approve"), now)
    await store.write(
        items.transition_sync, other.id, S.DISPATCHING, "system", now, expect_version=1
    )
    sent = (
        f"item {other.id} is dispatching: only an approval not yet sent or a reject can be undone"
    )
    with pytest.raises(errors.IllegalTransition, match=f"^{re.escape(sent)}$"):
        await review.undo(store, p, Shown(other.id, 1, 1), ALICE, now)


async def test_no_undo_window_dispatches_at_once(store: db.Store, now: datetime) -> None:
    p, item = pipeline(undo_window="0s"), await awaiting(store, now)
    await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), ALICE, "approve"), now)
    assert [r.item_id for r in await outbox.due(store, now, ["dispatch"])] == [item.id]
    edit = payloads.CardEdit.of((await outbox.for_item(store, item.id, "card_edit"))[0])
    assert edit.undo_until is None and "Undo" not in edit.status


# -- four eyes ----------------------------------------------------------------------------


async def test_the_author_of_a_version_cannot_approve_it_under_four_eyes(
    store: db.Store, now: datetime
) -> None:
    p, item = pipeline(quorum=2), await awaiting(store, now)
    assert p.approval.four_eyes and not pipeline().approval.four_eyes
    await flow.edit(store, p, flow.Revision(item.id, 1, ALICE), "Alice's words", now)
    before = await snapshot.tables(store)
    mine = (
        f"you wrote version 2 of item {item.id}: another approver must approve it "
        "(four eyes: approval.separate_editor)"
    )
    with pytest.raises(flow.WroteThisVersion, match=f"^{re.escape(mine)}$"):
        await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 2), ALICE, "approve"), now)
    assert await snapshot.tables(store) == before
    # Rejecting one's own version is allowed; others approve it.
    version_2 = Shown(item.id, 1, 2)
    bob = await flow.decide(store, p, rule.Vote(version_2, BOB, "approve"), now)
    assert bob.outcome == "pending"
    carol = await flow.decide(store, p, rule.Vote(version_2, CAROL, "approve"), now)
    assert carol.outcome == "approved"
    # Turned off explicitly, the author may approve even under quorum 2.
    lax, second = pipeline(quorum=2, separate_editor=False), await awaiting(store, now, "g2")
    await flow.edit(store, lax, flow.Revision(second.id, 1, ALICE), "mine", now)
    own = await flow.decide(store, lax, rule.Vote(Shown(second.id, 1, 2), ALICE, "approve"), now)
    assert own.outcome == "pending"


async def test_an_approval_names_each_voter_and_the_terminal_by_its_user(
    store: db.Store, now: datetime
) -> None:
    p = pipeline(quorum=2)
    ana = events.cli("ana")
    first, second = await awaiting(store, now), await awaiting(store, now, "g2")
    # Voters are listed by id (the terminal's is 0). A vote from the terminal counted
    # earlier is "the terminal" in the reason...
    await flow.decide(
        store, p, rule.Vote(Shown(first.id, 1, 1), decisions.TERMINAL, "approve", actor=ana), now
    )
    await flow.decide(store, p, rule.Vote(Shown(first.id, 1, 1), ALICE, "approve"), now)
    # ...and the deciding vote is named by the actor who cast it: the terminal's Unix user.
    await flow.decide(store, p, rule.Vote(Shown(second.id, 1, 1), ALICE, "approve"), now)
    await flow.decide(
        store, p, rule.Vote(Shown(second.id, 1, 1), decisions.TERMINAL, "approve", actor=ana), now
    )
    reasons = [(await events.for_entity(store, "item", i.id))[-1] for i in (first, second)]
    assert [(e.actor, e.reason) for e in reasons] == [
        (f"operator:{ALICE}", f"approved by the terminal, operator:{ALICE}"),
        ("cli:ana", f"approved by cli:ana, operator:{ALICE}"),
    ]


# -- a listed set -------------------------------------------------------------------------


async def test_a_listed_decision_applies_to_the_listed_versions_once(
    store: db.Store, now: datetime
) -> None:
    p = pipeline()
    first, second = await awaiting(store, now, "g1"), await awaiting(store, now, "g2")
    listed = await review.offer(store, "news", now)
    assert listed.offer.items == ((first.id, 1, 1), (second.id, 1, 1))
    await flow.edit(
        store, p, flow.Revision(first.id, 1, BOB), "newer", now
    )  # moved on since listed
    result = await review.decide_listed(
        store, {"news": p}, review.ListedVote(listed.offer.id, ALICE, "approve"), now
    )
    assert result.decided == [second.id]
    [(refused, why)] = result.refused
    assert refused == first.id and "is now at version 2" in why
    assert (await items.get(store, first.id)).state == S.AWAITING_APPROVAL
    moved = [
        e for e in await events.for_entity(store, "item", second.id) if e.to_state == S.APPROVED
    ]
    assert len(moved) == 1
    with pytest.raises(errors.Conflict, match="decided already"):
        await review.decide_listed(
            store, {"news": p}, review.ListedVote(listed.offer.id, ALICE, "approve"), now
        )
    stale = await review.offer(store, "news", now)
    with pytest.raises(errors.Conflict, match="too old"):
        await followups.get_offer(store, stale.offer.id, now + followups.OFFER_LIFE * 2)


# -- redraft ------------------------------------------------------------------------------


async def test_approve_all_on_a_quorum_counts_votes_apart_from_decisions(
    store: db.Store, now: datetime
) -> None:
    p = pipeline(quorum=2, operators=[ALICE, BOB])
    item = await awaiting(store, now)
    listed = await review.offer(store, "news", now)
    result = await review.decide_listed(
        store, {"news": p}, review.ListedVote(listed.offer.id, ALICE, "approve"), now
    )
    assert (result.decided, result.refused) == ([], [])
    assert result.voted == [(item.id, f"1 of 2; waiting for operator:{BOB}")]
    assert (await items.get(store, item.id)).state == S.AWAITING_APPROVAL


async def test_a_redraft_is_a_new_attempt_carrying_the_note(store: db.Store, now: datetime) -> None:
    p = pipeline()
    llm = p.model_copy(update={"draft": p.draft.model_copy(update={"drafter": "llm"})})
    item = await awaiting(store, now)
    with pytest.raises(review.Refused, match="only a rejected or expired draft"):
        await review.redraft(
            store, llm, review.Redraft(item.id, 1, "shorter", ALICE, "operator:11"), now
        )
    await review.reject(store, p, Shown(item.id, 1, 1), ALICE, "too long", now)
    with pytest.raises(review.Refused, match="drafts from a template"):
        await review.redraft(
            store, p, review.Redraft(item.id, 1, "shorter", ALICE, "operator:11"), now
        )
    later = now + timedelta(minutes=1)
    asked = review.Redraft(item.id, 1, "Shorter,\x00 please", ALICE, "operator:11")
    again = await review.redraft(store, llm, asked, later)
    assert (again.state, again.attempt) == (S.NEW, 2)
    assert await followups.note(store, item.id, 2) == "Shorter, please"
    assert await followups.note(store, item.id, 1) is None
    # Only the pipeline's approvers may ask for one.
    strict = llm.model_copy(update={"approval": pipeline(operators=[BOB]).approval})
    await review.reject(
        store, p, Shown((other := await awaiting(store, now, "g2")).id, 1, 1), BOB, "no", now
    )
    with pytest.raises(flow.NotAllowed):
        await review.redraft(
            store, strict, review.Redraft(other.id, 1, "again", ALICE, "operator:11"), later
        )


# -- reminders, escalation, digests --------------------------------------------------------


async def test_one_reminder_and_one_escalation_per_attempt(store: db.Store, now: datetime) -> None:
    p = pipeline(operators=[ALICE], remind_after="1h", escalate_after="2h", escalate_to=[CAROL])
    item = await awaiting(store, now)
    assert await nudges.sweep(store, {"news": p}, now + timedelta(minutes=59)) == nudges.Report()
    with pytest.raises(flow.NotAllowed):
        await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), CAROL, "approve"), now)

    first = await nudges.sweep(store, {"news": p}, now + timedelta(minutes=61))
    assert (first.reminded, first.escalated) == ([item.id], [])
    second = await nudges.sweep(store, {"news": p}, now + timedelta(hours=3))
    assert (second.reminded, second.escalated) == ([], [item.id])
    assert await nudges.sweep(store, {"news": p}, now + timedelta(hours=4)) == nudges.Report()
    reasons = [
        e.reason for e in await events.for_entity(store, "item", item.id) if e.actor == "sweep"
    ]
    assert reasons == ["reminded the approvers after 1 h 1 min", "escalated to 13 after 3 h"]
    cards = await outbox.for_item(store, item.id, "card")
    assert [c.payload.get("chats") for c in cards] == [[CAROL]]
    decided = await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), CAROL, "approve"), now)
    assert decided.outcome == "approved"


async def test_a_digest_once_per_slot_only_when_something_waits(
    store: db.Store, now: datetime
) -> None:
    slot = now.replace(hour=9, minute=0, second=0, microsecond=0) + timedelta(days=1)
    p = pipeline(digest="0 9 * * *")
    assert (await nudges.sweep(store, {"news": p}, slot)).digests == []  # nothing waits
    item = await awaiting(store, slot)
    assert (await nudges.sweep(store, {"news": p}, slot + timedelta(minutes=1))).digests == ["news"]
    assert (await nudges.sweep(store, {"news": p}, slot + timedelta(minutes=2))).digests == []
    late = slot + nudges.DIGEST_GRACE + timedelta(days=1, minutes=1)
    assert (await nudges.sweep(store, {"news": p}, late)).digests == []  # missed: skipped
    rows: list[Any] = await store.read(
        lambda c: list(c.execute("SELECT payload FROM outbox WHERE kind = 'alert'"))
    )
    assert len(rows) == 1 and f"item {item.id} v1: g1" in rows[0][0]


# -- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"escalate_after": "2h"}, "escalate_after and escalate_to go together"),
        ({"escalate_to": [5]}, "escalate_after and escalate_to go together"),
        ({"digest": "1h"}, "digest must be a 5-field cron expression"),
        ({"undo_window": "11m"}, "undo_window must be at most 10m"),
        ({"reject_reasons": ["a"] * 7}, "at most 6 items"),
        ({"reject_reasons": ["x" * 41]}, "at most 40 characters"),
    ],
)
def test_bad_approval_rules_are_refused_with_the_reason(
    rules: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        pipeline(**rules)


def test_escalation_must_name_bot_operators() -> None:
    data = pipeline().model_dump(mode="json")
    data["approval"] |= {"escalate_after": "1h", "escalate_to": [99]}
    with pytest.raises(ValueError, match="99 not among the bot operators"):
        spec.Pipeline.model_validate(data, context={"operators": frozenset({1, 2})})


async def test_a_pipeline_whose_pass_fails_does_not_stop_the_others(
    store: db.Store, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = pipeline(digest="0 9 * * *").model_copy(update={"name": "broken"})
    news = pipeline(remind_after="1h")
    item = await awaiting(store, now)

    async def fails(*args: object) -> bool:
        raise RuntimeError("a digest that cannot be built")

    monkeypatch.setattr(nudges, "_digest", fails)
    report = await nudges.sweep(store, {"broken": broken, "news": news}, now + timedelta(hours=2))
    assert report.reminded == [item.id]


async def test_a_vote_toward_a_quorum_says_how_many_are_in_and_who_is_awaited(
    store: db.Store, now: datetime
) -> None:
    p, item = pipeline(quorum=2, operators=[ALICE, BOB, CAROL]), await awaiting(store, now)
    pipelines = {"news": p}
    cli = "cli:ana"
    voted = await review.at_terminal(store, pipelines, review.Typed("approve", item.id, cli), now)
    who = f"operator:{ALICE}, operator:{BOB}, operator:{CAROL}"
    assert voted.said == f"your vote is in: 1 of 2 (waiting for 1 more of {who})"
    assert voted.item.state == S.AWAITING_APPROVAL
    unchanged = await snapshot.tables(store)
    again = await review.at_terminal(store, pipelines, review.Typed("approve", item.id, cli), now)
    assert again.said == f"you already approved this version: 1 of 2 (waiting for 1 more of {who})"
    assert await snapshot.tables(store) == unchanged

    alice = await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), ALICE, "approve"), now)
    assert flow.vote_words(alice, p, ALICE) == "✅ approved"
    late = await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), BOB, "approve"), now)
    assert flow.vote_words(late, p, BOB) == "nothing changed: the item is approved"
    with pytest.raises(review.Refused, match=f"nothing changed: item {item.id} is approved"):
        await review.at_terminal(store, pipelines, review.Typed("approve", item.id, cli), now)


async def test_the_awaited_approver_is_named_when_only_one_can_complete_the_quorum(
    store: db.Store, now: datetime
) -> None:
    p, item = pipeline(quorum=2, operators=[ALICE, BOB]), await awaiting(store, now)
    vote = await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), ALICE, "approve"), now)
    assert (
        flow.vote_words(vote, p, ALICE) == f"your vote is in: 1 of 2 (waiting for operator:{BOB})"
    )


async def test_an_edit_from_the_terminal_is_recorded_as_its_unix_user(
    store: db.Store, now: datetime
) -> None:
    p, item = pipeline(), await awaiting(store, now)
    edited = await review.at_terminal(
        store,
        {"news": p},
        review.Typed("edit", item.id, "cli:ana", text="the words ana chose"),
        now,
    )
    assert edited.said == "edited: version 2"
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert (last.actor, last.reason) == ("cli:ana", "edited: version 1 -> 2")
    [card] = [r.payload for r in await outbox.for_item(store, item.id, "card") if r.payload]
    assert card.get("note") == "edited by cli:ana"
