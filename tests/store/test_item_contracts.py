"""What decisions, drafts and item queries return, field for field, and what a refusal says.

The machine tests pin the moves; these pin the values a caller reads back (the decision's
item, votes and quorum; a draft's every field; the lists behind /pending and /status), so a
mutation that returns the wrong row or drops a field fails here.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from datetime import datetime, timedelta

import pytest

from pipelines.approval import flow, rule
from store import backend, db, drafts, errors, items, outbox, payloads
from store.audit import events
from store.items.machine import State
from store.review.followups import Shown
from tests import snapshot
from tests.store import statements

S = State


async def _awaiting(store: db.Store, now: datetime, source_id: str = "guid") -> items.Item:
    item = await store.write(
        items.create_sync, "news", "feed", source_id, {"title": source_id}, now
    )
    assert item is not None
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)

    def unit(conn: sqlite3.Connection) -> items.Item:
        drafts.add_sync(
            conn, item.id, drafts.Body("draft text", {"drafter": "template"}, cost_micros=42), now
        )
        return items.transition_sync(conn, item.id, S.AWAITING_APPROVAL, "system", now)

    return await store.write(unit)


# --- decisions --------------------------------------------------------------------------------


async def test_one_approval_is_enough_by_default(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    decided = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now
    )
    current = await items.get(store, item.id)
    assert decided == rule.Decision(current, "approved", (7,), 1)
    assert current.reason == "approved by operator:7"


async def test_a_reject_says_who_and_carries_the_votes(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    first = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now, quorum=2
    )
    assert first == rule.Decision(await items.get(store, item.id), "pending", (7,), 2)
    rejected = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 8, "reject"), now, quorum=2
    )
    current = await items.get(store, item.id)
    assert rejected == rule.Decision(current, "rejected", (7,), 2)
    assert (current.state, current.reason) == (S.REJECTED, "rejected by operator:8")
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert (last.to_state, last.actor, last.reason) == (S.REJECTED, "operator:8", current.reason)


async def test_a_decision_on_a_decided_item_is_unchanged_and_says_so(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now, quorum=2
    )
    await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 8, "approve"), now, quorum=2
    )
    before = await snapshot.tables(store)
    late = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 9, "reject"), now, quorum=2
    )
    repeat = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now, quorum=2
    )
    current = await items.get(store, item.id)
    assert late == rule.Decision(current, "unchanged", (7, 8), 2)
    assert repeat == late
    assert await snapshot.tables(store) == before


async def test_a_repeat_vote_while_waiting_is_unchanged(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now, quorum=3
    )
    before = await snapshot.tables(store)
    repeat = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now, quorum=3
    )
    assert repeat == rule.Decision(await items.get(store, item.id), "unchanged", (7,), 3)
    assert await snapshot.tables(store) == before


async def test_an_unknown_choice_is_refused_and_writes_nothing(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    before = await snapshot.tables(store)
    with pytest.raises(
        ValueError, match=re.escape("unknown decision 'maybe'; valid: approve, reject")
    ):
        vote = rule.Vote(Shown(item.id, 1, 1), 7, "maybe")  # type: ignore[arg-type]
        await store.write(flow.decide_sync, vote, now)
    assert await snapshot.tables(store) == before


async def test_rows_a_caller_adds_commit_in_the_deciding_unit_with_the_moved_item(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)

    def unit(conn: backend.Conn) -> rule.Decision:
        decided = flow.decide_sync(conn, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now)
        outbox.alert_sync(conn, payloads.Alert(text=decided.item.state), now)
        return decided

    decided = await store.write(unit)
    assert decided.item.state == S.APPROVED
    (alert,) = await outbox.due(store, now, ["alert"])
    assert alert.payload == {"level": "error", "text": "approved"}


# --- drafts -----------------------------------------------------------------------------------


async def test_a_draft_reads_back_field_for_field(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    draft = await drafts.get(store, item.id, 1)
    assert draft == drafts.Draft(
        item_id=item.id,
        version=1,
        text="draft text",
        content_hash=hashlib.sha256(b"draft text").hexdigest(),
        provenance={"drafter": "template"},
        cost_micros=42,
        created_at=now,
    )
    with pytest.raises(errors.NotFound, match=f"^item {item.id} has no draft version 2$"):
        await drafts.get(store, item.id, 2)


async def test_an_edit_is_a_same_state_event_by_the_operator(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    later = now + timedelta(minutes=3)
    edited = await store.write(drafts.edit_sync, drafts.Edit(item.id, 1, 7), "better words", later)
    assert edited == drafts.Draft(
        item.id, 2, "better words", edited.content_hash, {"operator": 7, "edit_of": 1}, None, later
    )
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert (last.from_state, last.to_state, last.actor, last.attempt, last.reason, last.at) == (
        S.AWAITING_APPROVAL,
        S.AWAITING_APPROVAL,
        "operator:7",
        1,
        "edited: version 1 -> 2",
        later,
    )
    assert (await items.get(store, item.id)).version == 2


async def test_an_empty_edit_says_so_exactly(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    before = await snapshot.tables(store)
    with pytest.raises(ValueError, match=r"^the replacement text is empty$"):
        await store.write(drafts.edit_sync, drafts.Edit(item.id, 1, 7), " ", now)
    assert await snapshot.tables(store) == before


# --- replay -----------------------------------------------------------------------------------


async def test_a_replay_records_its_reason_and_actor(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    await store.write(flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 7, "reject"), now)
    replayed = await store.write(items.replay_sync, item.id, "operator:7", now, "second look")
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert (last.from_state, last.to_state, last.actor, last.attempt, last.reason) == (
        S.REJECTED,
        S.NEW,
        "operator:7",
        2,
        "second look",
    )
    assert (replayed.state, replayed.attempt, replayed.reason) == (S.NEW, 2, "second look")


async def test_replay_refusals_say_exactly_why(store: db.Store, now: datetime) -> None:
    waiting = await _awaiting(store, now, "waiting")
    sent = await _awaiting(store, now, "sent")
    await store.write(flow.decide_sync, rule.Vote(Shown(sent.id, 1, 1), 7, "approve"), now)
    for state in (S.DISPATCHING, S.DISPATCHED):
        await store.write(items.transition_sync, sent.id, state, "system", now)
    before = await snapshot.tables(store)
    tail = "only breach, expired, failed, filtered, rejected, skipped items can be replayed"
    with pytest.raises(errors.IllegalTransition) as refused:
        await store.write(items.replay_sync, waiting.id, "cli", now, "why")
    assert str(refused.value) == f"item {waiting.id} is awaiting_approval, not dropped; {tail}"
    with pytest.raises(errors.IllegalTransition) as refused:
        await store.write(items.replay_sync, sent.id, "cli", now, "why")
    assert str(refused.value) == (
        f"item {sent.id} is dispatched, not dropped; {tail} "
        f"(to send it again: gatehouse replay {sent.id} --force)"
    )
    assert await snapshot.tables(store) == before


async def test_an_automatic_replay_right_after_an_automatic_entry_is_floored(
    store: db.Store, now: datetime
) -> None:
    item = await store.write(items.create_sync, "news", "feed", "guid", {"t": 1}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, S.FAILED, "system", now)
    before = await snapshot.tables(store)
    with pytest.raises(items.Throttled, match="entered new automatically"):
        await store.write(
            items.replay_sync, item.id, "scheduler", now + timedelta(seconds=1), "loop"
        )
    assert await snapshot.tables(store) == before
    # An operator is never floored.
    replayed = await store.write(items.replay_sync, item.id, "operator:7", now, "by hand")
    assert replayed.attempt == 2


# --- the lists behind /pending and /status ----------------------------------------------------


async def test_in_state_filters_by_pipeline_orders_oldest_first_and_limits(
    store: db.Store, now: datetime
) -> None:
    def unit(conn: sqlite3.Connection) -> None:
        for n in range(102):
            made = items.create_sync(conn, "news", "feed", f"n{n}", {"n": n}, now)
            assert made is not None
            at = now + timedelta(seconds=102 - n)  # the last created moved first
            items.transition_sync(conn, made.id, S.DRAFTING, "system", at)
        other = items.create_sync(conn, "other", "feed", "o", {"n": 0}, now)
        assert other is not None
        items.transition_sync(conn, other.id, S.DRAFTING, "system", now)

    await store.write(unit)
    drafting = await items.in_state(store, S.DRAFTING, "news")
    assert len(drafting) == 100
    assert [i.source_id for i in drafting[:2]] == ["n101", "n100"]
    assert {i.pipeline for i in drafting} == {"news"}
    everywhere = await items.in_state(store, S.DRAFTING, limit=3)
    assert [i.source_id for i in everywhere] == ["o", "n101", "n100"]
    assert await items.in_state(store, S.NEW) == []
    counted = await items.counts(store, ["news", "other", "idle"], [S.DRAFTING, S.NEW])
    assert counted == {
        "news": {S.DRAFTING: 102, S.NEW: 0},
        "other": {S.DRAFTING: 1, S.NEW: 0},
        "idle": {S.DRAFTING: 0, S.NEW: 0},
    }


# --- items and transitions ------------------------------------------------------------------


def test_the_content_hash_is_a_known_answer_independent_of_key_order() -> None:
    """Claims and the duplicate gate compare it across runs: it must never drift."""
    payload = {"b": 1, "a": "café", "c": [1, 2]}
    known = "1a16154cf488b159ad184986fc8b0ef0fd24e078dad57b70f451696f2de21c96"
    assert items.content_hash(payload) == known
    assert items.content_hash(dict(reversed(payload.items()))) == known


async def test_an_item_reads_back_field_for_field(store: db.Store, now: datetime) -> None:
    made = await store.write(
        items.create_sync, "news", "city", "guid-9", {"title": "T", "n": 1}, now
    )
    assert made is not None
    assert await items.get(store, made.id) == items.Item(
        id=made.id,
        pipeline="news",
        scope="city",
        source_id="guid-9",
        payload_json=made.payload_json,
        content_hash=items.content_hash({"title": "T", "n": 1}),
        state=S.NEW,
        attempt=1,
        version=0,
        reason=None,
        created_at=now,
        last_transition_at=now,
        deadline=None,
    )
    assert made.payload == {"title": "T", "n": 1}
    (created,) = await events.for_entity(store, "item", made.id)
    assert (created.from_state, created.to_state, created.reason) == (None, "new", "fetched")
    cafe = await store.write(items.create_sync, "news", "city", "guid-10", {"title": "café"}, now)
    assert cafe is not None and cafe.payload_json == '{"title": "café"}'  # stored readable
    before = await snapshot.tables(store)
    with pytest.raises(errors.NotFound, match=r"^no item 999$"):
        await items.get(store, 999)
    assert await snapshot.tables(store) == before


async def test_a_transition_returns_the_row_as_stored_and_records_its_reason(
    store: db.Store, now: datetime
) -> None:
    made = await store.write(items.create_sync, "news", "city", "guid-9", {"title": "T"}, now)
    assert made is not None
    later = now + timedelta(minutes=2)
    moved = await store.write(
        items.transition_sync,
        made.id,
        S.DRAFTING,
        "scheduler",
        later,
        reason="tick",
        deadline=timedelta(hours=1),
    )
    assert moved == await items.get(store, made.id)
    assert (moved.reason, moved.last_transition_at, moved.deadline) == (
        "tick",
        later,
        later + timedelta(hours=1),
    )
    last = (await events.for_entity(store, "item", made.id))[-1]
    assert (last.reason, last.actor, last.at) == ("tick", "scheduler", later)
    # A state without a deadline gets none, whatever the caller passed.
    failed = await store.write(
        items.transition_sync, made.id, S.FAILED, "system", later, deadline=timedelta(hours=1)
    )
    assert failed.deadline is None and (await items.get(store, made.id)).deadline is None


async def test_transition_refusals_say_exactly_why(store: db.Store, now: datetime) -> None:
    made = await store.write(items.create_sync, "news", "city", "guid-9", {"title": "T"}, now)
    assert made is not None
    await store.write(items.transition_sync, made.id, S.DRAFTING, "system", now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict) as refused:
        await store.write(items.transition_sync, made.id, S.FAILED, "system", now, expect_attempt=5)
    assert str(refused.value) == (
        f"item {made.id} is at version 0 attempt 1; this request is for version None attempt 5"
    )
    assert await snapshot.tables(store) == before

    await store.write(items.transition_sync, made.id, S.FAILED, "system", now)
    await store.write(items.replay_sync, made.id, "operator:1", now, "again")
    before = await snapshot.tables(store)
    with pytest.raises(items.Throttled) as floored:
        await store.write(
            items.transition_sync, made.id, S.DRAFTING, "sweep", now + timedelta(seconds=1)
        )
    assert str(floored.value) == (
        f"item {made.id} entered drafting automatically at {now.isoformat()}; "
        "automatic re-entry waits 5 s"
    )
    assert await snapshot.tables(store) == before

    await store.write(items.transition_sync, made.id, S.FAILED, "operator:1", now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition) as illegal:
        await store.write(items.transition_sync, made.id, S.DRAFTING, "system", now)
    assert str(illegal.value) == (
        f"item {made.id} cannot go from failed to drafting; "
        "from failed: none (an end state; use replay)"
    )
    assert await snapshot.tables(store) == before


async def test_a_lone_surrogate_in_a_payload_is_stored_as_a_replacement_character(
    store: db.Store, now: datetime
) -> None:
    """SQLite cannot hold a lone surrogate: the item is still recorded, cleaned, readable."""
    made = await store.write(
        items.create_sync, "news", "feed", "odd", {"title": "bad \ud800 t", "n": 1}, now
    )
    assert made is not None
    cleaned = {"title": "bad \ufffd t", "n": 1}
    assert made.payload == cleaned
    assert made.payload_json == '{"title": "bad \ufffd t", "n": 1}'  # the character itself
    assert made.content_hash == items.content_hash(cleaned)
    assert (await items.get(store, made.id)).payload == cleaned


async def test_a_decision_locks_its_item_once_and_moves_it(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)

    def unit(conn: backend.Conn) -> tuple[rule.Decision, int]:
        counting = statements.Counting(conn)
        decided = flow.decide_sync(counting, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now)
        return decided, counting.sent["items.lock"]

    decided, locks = await store.write(unit)
    assert locks == 1
    assert decided.item == await items.get(store, item.id)
    assert decided.item.state == S.APPROVED


async def test_a_transition_from_a_stale_locked_item_is_refused_and_writes_nothing(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)

    def unit(conn: backend.Conn) -> None:
        locked = items.lock_sync(conn, item.id)
        items.transition_sync(conn, item.id, S.APPROVED, "operator:7", now, locked=locked)
        items.transition_sync(conn, item.id, S.REJECTED, "operator:7", now, locked=locked)

    with pytest.raises(errors.Conflict, match="changed underneath"):
        await store.write(unit)
    assert (await items.get(store, item.id)).state == S.AWAITING_APPROVAL
    with pytest.raises(ValueError, match="locked is item"):
        await store.write(items.transition_sync, item.id + 1, S.APPROVED, "x", now, locked=item)


async def test_a_new_draft_comes_back_from_its_insert_not_a_second_read(
    store: db.Store, now: datetime
) -> None:
    made = await store.write(items.create_sync, "news", "feed", "guid", {"title": "t"}, now)
    assert made is not None

    def unit(conn: backend.Conn) -> tuple[drafts.Draft, int]:
        counting = statements.Counting(conn)
        draft = drafts.add_sync(counting, made.id, drafts.Body("text", {"drafter": "x"}), now)
        return draft, counting.total

    draft, sent = await store.write(unit)
    assert sent == 3  # lock the item, insert the draft, point the item at it
    assert draft == await drafts.get(store, made.id, 1)
