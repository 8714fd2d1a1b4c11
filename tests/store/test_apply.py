"""`items.apply`: a list of Moves made in one statement, each item left behind locked and
answered once (moved after all, or refused with why), nothing written for a refusal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from store import backend, db, drafts, errors, items, outbox
from store.audit import events
from store.items.machine import State
from tests.store import statements

S = State


async def _made(store: db.Store, now: datetime, *ids: str) -> list[items.Item]:
    fetched = {source_id: {"title": source_id} for source_id in ids}
    made: list[items.Item] = await store.write(items.create_many_sync, "news", "s", fetched, now)
    return made


async def test_each_move_of_a_batch_is_answered_once_with_why(
    store: db.Store, now: datetime
) -> None:
    """One moves, one is stale, one is there already, one may not go there, one is gone,
    one entered its state automatically within the floor, one is asked twice."""
    fresh, stale, there, ended, floored, twice = await _made(store, now, *"abcdef")
    await store.write(items.transition_sync, stale.id, S.FAILED, "operator:1", now)
    stale = await store.write(items.replay_sync, stale.id, "operator:1", now, "again")
    old_stale = items.Seen(stale.id, S.NEW, stale.attempt - 1, stale.version)
    await store.write(items.transition_sync, there.id, S.DRAFTING, "system", now)
    await store.write(items.transition_sync, ended.id, S.FILTERED, "system", now)
    await store.write(items.transition_sync, floored.id, S.DRAFTING, "system", now)
    await store.write(items.transition_sync, floored.id, S.FAILED, "system", now)
    floored = await store.write(items.replay_sync, floored.id, "operator:1", now, "again")
    gone = items.Seen(10_000, S.NEW, 1, 0)
    later = now + timedelta(seconds=1)
    seen = [fresh, old_stale, there, ended, gone, floored, twice, twice]
    asked = [items.Move(item, S.DRAFTING, "system", later) for item in seen]
    before = {i.id: await events.for_entity(store, "item", i.id) for i in seen[1:4]}

    answers = await store.write(items.apply, asked)

    assert [a.move for a in answers] == asked
    whys = [a.why if isinstance(a, items.Refused) else "moved" for a in answers]
    assert whys == ["moved", "stale", "repeat", "illegal", "gone", "throttled", "moved", "repeat"]
    for answer in answers:
        if isinstance(answer, items.Moved):
            assert answer.item == await items.get(store, answer.item.id)
            assert (answer.item.state, answer.item.last_transition_at) == (S.DRAFTING, later)
    refused = [a for a in answers if isinstance(a, items.Refused)]
    assert [a.item and a.item.state for a in refused] == [S.NEW, S.DRAFTING, S.FILTERED, None,
                                                          S.NEW, S.DRAFTING]  # fmt: skip
    illegal = answers[3]
    assert isinstance(illegal, items.Refused) and "from filtered to drafting" in illegal.detail
    for item_id, trail in before.items():
        assert await events.for_entity(store, "item", item_id) == trail
    assert len(await events.for_entity(store, "item", twice.id)) == 2  # one move, one event


async def test_apply_one_raises_a_refusal_as_the_stores_error(
    store: db.Store, now: datetime
) -> None:
    [item] = await _made(store, now, "a")
    drafting = await store.write(items.apply_one, items.Move(item, S.DRAFTING, "system", now))
    assert drafting == await items.get(store, item.id) and drafting.state == S.DRAFTING
    again = await store.write(items.apply_one, items.Move(item, S.DRAFTING, "system", now))
    assert again == drafting  # a repeat: the item as it is
    with pytest.raises(errors.IllegalTransition, match="cannot go from drafting to approved"):
        await store.write(items.apply_one, items.Move(item, S.APPROVED, "system", now))
    gone = items.Seen(item.id + 1, S.NEW, 1, 0)
    with pytest.raises(errors.NotFound):
        await store.write(items.apply_one, items.Move(gone, S.DRAFTING, "system", now))


async def test_an_item_left_behind_with_the_same_work_is_moved_after_all(
    store: db.Store, now: datetime
) -> None:
    """A move that allows any version finds the item at another one and makes it from
    there: two statements more, and its event says the state it left."""
    [item] = await _made(store, now, "a")
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)
    await store.write(drafts.add_sync, item.id, drafts.Body("a draft", {"drafter": "x"}), now)
    seen = items.Seen(item.id, S.DRAFTING, item.attempt, item.version)  # before the draft
    move = items.Move(seen, S.FAILED, "sweep", now, "stuck", any_version=True)

    def unit(conn: backend.Conn) -> tuple[list[items.Moved | items.Refused], dict[str, int]]:
        counted = statements.Counting(conn)
        return items.apply(counted, [move]), dict(counted.sent)

    [answer], sent = await store.write(unit)

    assert isinstance(answer, items.Moved) and answer.item.version == 1
    # The batch's statement (a Seen's row comes back whole), the lock, the move from it.
    assert (sent["items.move_many"], sent["items.lock"], sent["items.move"]) == (1, 1, 1)
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert (last.from_state, last.to_state, last.reason) == ("drafting", "failed", "stuck")


async def test_moves_to_different_states_share_one_statement_with_their_own_rows(
    store: db.Store, now: datetime
) -> None:
    a, b = await _made(store, now, "a", "b")
    alert = outbox.Queued(b.id, "alert", outbox.ALERTS, {"text": "b filtered"}, "k-b")
    asked = [
        items.Move(a, S.DRAFTING, "system", now, deadline=timedelta(minutes=3)),
        items.Move(b, S.FILTERED, "operator:2", now, "a rule", effects=[alert]),
    ]

    def unit(conn: backend.Conn) -> tuple[list[items.Moved | items.Refused], dict[str, int]]:
        counted = statements.Counting(conn)
        return items.apply(counted, asked), dict(counted.sent)

    answers, sent = await store.write(unit)

    assert sent["items.move_many"] == 1 and "items.lock" not in sent
    moved = [answer.item for answer in answers if isinstance(answer, items.Moved)]
    assert [(i.state, i.deadline) for i in moved] == [
        (S.DRAFTING, now + timedelta(minutes=3)), (S.FILTERED, None),
    ]  # fmt: skip
    trail = [(await events.for_entity(store, "item", i.id))[-1] for i in (a, b)]
    assert [(e.to_state, e.actor, e.reason) for e in trail] == [
        ("drafting", "system", None), ("filtered", "operator:2", "a rule"),
    ]  # fmt: skip
    assert [r.dedupe_key for r in await outbox.for_item(store, b.id, "alert")] == ["k-b"]
    assert await outbox.for_item(store, a.id, "alert") == []


def test_an_effect_about_another_item_is_refused_when_the_move_is_made() -> None:
    seen = items.Seen(1, S.NEW, 1, 0)
    other = outbox.Queued(2, "alert", outbox.ALERTS, {"text": "x"})
    with pytest.raises(ValueError, match="about another item"):
        items.Move(seen, S.DRAFTING, "system", datetime(2026, 1, 1, tzinfo=UTC), effects=[other])
