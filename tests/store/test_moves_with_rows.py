"""A move and what goes with it: its event and the outbox rows its transition causes are
written only if the item moves, on PostgreSQL by the move's own statement (one round
trip), on SQLite by one statement each after it; a vote hands back the approvals it
counts toward, so nothing reads them again; a chunk's drafts are read in one statement."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from pipelines.approval import flow, rule
from store import backend, db, drafts, errors, items, outbox
from store.audit import events
from store.items.machine import State
from store.review.followups import Shown
from tests import snapshot
from tests.store import statements

S = State
Decided = tuple[rule.Decision, dict[str, int]]


async def _awaiting(store: db.Store, now: datetime, source_id: str = "g") -> items.Item:
    item = await store.write(items.create_sync, "news", "feed", source_id, {"t": 1}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)

    def unit(conn: backend.Conn) -> items.Item:
        drafts.add_sync(conn, item.id, drafts.Body("draft text", {"drafter": "template"}), now)
        return items.transition_sync(conn, item.id, S.AWAITING_APPROVAL, "system", now)

    return await store.write(unit)


def _rows(item: items.Item, key: str) -> list[outbox.Queued]:
    return [
        outbox.Queued(item.id, "card_edit", outbox.OPERATORS, {"status": "approved"}),
        outbox.Queued(item.id, "dispatch", "news", {"item_id": item.id}, key),
    ]


def _sent(store: db.Store, moved: dict[str, int], apart: dict[str, int]) -> dict[str, int]:
    """What a unit sends: `moved` on PostgreSQL, and on SQLite `apart` beside it."""
    return moved if store.dialect == "postgres" else {**moved, **apart}


async def test_a_move_writes_its_event_and_rows_with_it_and_wakes_their_workers(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    woken = outbox.wakeup(store, ["dispatch"])
    later = now + timedelta(seconds=3)

    def unit(conn: backend.Conn) -> tuple[items.Item, dict[str, int]]:
        counted = statements.Counting(conn)
        moved = items.transition_sync(
            counted, item.id, S.APPROVED, "operator:7", later, reason="ok", queue=_rows(item, "d1")
        )
        return moved, dict(counted.sent)

    moved, sent = await store.write(unit)
    apart = {"events.insert": 1, "outbox.enqueue": 2, "notify.notify": 2}
    assert sent == _sent(store, {"items.lock": 1, "items.move": 1}, apart)
    assert moved == await items.get(store, item.id) and moved.state == S.APPROVED
    event = (await events.for_entity(store, "item", item.id))[-1]
    assert (event.from_state, event.to_state, event.actor, event.attempt, event.reason) == (
        "awaiting_approval", "approved", "operator:7", 1, "ok",
    )  # fmt: skip
    [edit] = await outbox.for_item(store, item.id, "card_edit")
    [dispatch] = await outbox.for_item(store, item.id, "dispatch")
    assert (edit.target, edit.payload, edit.dedupe_key, edit.created_at) == (
        outbox.OPERATORS, {"status": "approved"}, None, later,
    )  # fmt: skip
    assert (dispatch.dedupe_key, dispatch.next_attempt_at, dispatch.state) == (
        "d1",
        later,
        "pending",
    )
    assert edit.id < dispatch.id  # in the order given
    assert woken.is_set()


async def test_a_refused_or_repeated_move_writes_none_of_its_rows(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict):
        await store.write(
            items.transition_sync, item.id, S.APPROVED, "operator:7", now, expect_version=9,
            queue=_rows(item, "d1"),
        )  # fmt: skip
    stale = items.Seen(item.id, S.AWAITING_APPROVAL, item.attempt, item.version + 1)
    move = items.Move(stale, S.APPROVED, "system", now, effects=_rows(item, "d2"))
    [answer] = await store.write(items.apply, [move])
    assert isinstance(answer, items.Refused) and answer.why == "stale"
    assert await store.write(
        items.transition_sync, item.id, S.AWAITING_APPROVAL, "system", now, queue=_rows(item, "d3")
    ) == item  # fmt: skip
    assert await snapshot.tables(store) == before


async def test_a_row_whose_key_is_taken_is_left_out_and_the_item_still_moves(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    await outbox.enqueue(
        store, "dispatch", "news", {"first": True}, now, item_id=item.id, dedupe_key="d1"
    )
    moved = await store.write(
        items.transition_sync, item.id, S.APPROVED, "operator:7", now, queue=_rows(item, "d1")
    )
    assert moved.state == S.APPROVED
    [dispatch] = await outbox.for_item(store, item.id, "dispatch")
    assert dispatch.payload == {"first": True}
    assert len(await outbox.for_item(store, item.id, "card_edit")) == 1


async def test_a_chunk_queues_each_moved_items_rows_for_it_alone(
    store: db.Store, now: datetime
) -> None:
    a, b, c = [await _awaiting(store, now, n) for n in "abc"]
    stale = items.Seen(b.id, S.AWAITING_APPROVAL, b.attempt, b.version + 1)
    asked = [
        items.Move(seen, S.APPROVED, "operator:7", now, effects=_rows(item, f"d{item.id}"))
        for seen, item in ((c, c), (stale, b), (a, a))
    ]

    answers = await store.write(items.apply, asked)

    moved = [answer.item for answer in answers if isinstance(answer, items.Moved)]
    assert [item.id for item in moved] == [c.id, a.id]
    for item, queued in ((a, 1), (b, 0), (c, 1)):
        dispatches = await outbox.for_item(store, item.id, "dispatch")
        assert [row.dedupe_key for row in dispatches] == [f"d{item.id}"] * queued
        assert len(await outbox.for_item(store, item.id, "card_edit")) == queued
    last = [(await events.for_entity(store, "item", i.id))[-1] for i in (c, a)]
    assert [(e.from_state, e.to_state) for e in last] == [("awaiting_approval", "approved")] * 2
    assert last[0].id < last[1].id  # in the order given


async def test_a_vote_hands_back_the_approvals_it_counts_toward(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)

    def vote(operator: int, at: datetime) -> Callable[[backend.Conn], Decided]:
        def unit(conn: backend.Conn) -> Decided:
            counted = statements.Counting(conn)
            decided = flow.decide_sync(
                counted,
                rule.Vote(Shown(item.id, item.attempt, item.version), operator, "approve"),
                at,
                quorum=2,
            )
            return decided, dict(counted.sent)

        return unit

    first, sent = await store.write(vote(9, now))
    assert (first.outcome, first.approvals) == ("pending", (9,))
    assert sent == {"items.lock": 1, "items.vote": 1}
    second, sent = await store.write(vote(3, now + timedelta(seconds=1)))
    assert (second.outcome, second.approvals) == ("approved", (9, 3))  # in the order cast
    assert sent == _sent(store, {"items.lock": 1, "items.vote": 1, "items.move": 1},
                         {"events.insert": 1})  # fmt: skip
    again, _ = await store.write(vote(9, now + timedelta(seconds=2)))
    assert (again.outcome, again.approvals) == ("unchanged", (9, 3))


async def test_several_draft_versions_are_read_in_one_statement(
    store: db.Store, now: datetime
) -> None:
    a, b = [await _awaiting(store, now, n) for n in "ab"]
    await store.write(drafts.add_sync, a.id, drafts.Body("second words", {"operator": 7}), now)
    wanted = [(a.id, 2), (b.id, 1), (a.id, 1), (b.id, 5)]

    def unit(conn: backend.Conn) -> tuple[dict[tuple[int, int], drafts.Draft], dict[str, int]]:
        counted = statements.Counting(conn)
        return drafts.get_many_sync(counted, wanted), dict(counted.sent)

    found, sent = await store.write(unit)
    assert sent == {"items.drafts": 1}
    assert found == {
        key: await store.read(drafts.get_sync, *key) for key in [(a.id, 2), (b.id, 1), (a.id, 1)]
    }
    assert found[(a.id, 2)].text == "second words"
    assert await store.write(drafts.get_many_sync, []) == {}
