"""What a chunk of items costs in statements (each a round trip to a PostgreSQL server):
recording a fetched chunk and moving it to drafting take the same few statements for one
item or a hundred, and an automatic move checks its floor inside the move itself. On
PostgreSQL a move writes its events in its own statement; SQLite, which cannot write
inside WITH, takes one more. The rows written are those the item-by-item path wrote."""

from __future__ import annotations

from datetime import datetime, timedelta

from pipelines.drafting import moves
from store import backend, db, drafts, items, outbox
from store.audit import events
from store.items.machine import State
from tests import snapshot
from tests.store import statements

S = State


def _with_events(store: db.Store, sent: dict[str, int], insert: str) -> dict[str, int]:
    """`sent`, and on SQLite the statement that writes the events beside the move."""
    return sent if store.dialect == "postgres" else {**sent, insert: 1}


async def _recorded(store: db.Store, now: datetime, ids: list[str]) -> list[items.Item]:
    fetched = {source_id: {"title": source_id} for source_id in ids}
    made: list[items.Item] = await store.write(items.create_many_sync, "news", "feed", fetched, now)
    return made


async def test_a_chunk_is_recorded_in_two_statements_and_known_ids_are_left_alone(
    store: db.Store, now: datetime
) -> None:
    known = await store.write(items.create_sync, "news", "feed", "g3", {"title": "old"}, now)
    assert known is not None
    ids = [f"g{n}" for n in range(30)]

    def unit(conn: backend.Conn) -> tuple[list[items.Item], dict[str, int]]:
        counted = statements.Counting(conn)
        fetched = {source_id: {"title": source_id} for source_id in ids}
        return items.create_many_sync(counted, "news", "feed", fetched, now), dict(counted.sent)

    made, sent = await store.write(unit)
    assert sent == _with_events(store, {"items.create_many": 1}, "events.insert_many")
    assert [item.source_id for item in made] == [i for i in ids if i != "g3"]
    for item in made:
        assert item == await items.get(store, item.id)
        assert item.state == S.NEW and item.payload == {"title": item.source_id}
        assert item.content_hash == items.content_hash({"title": item.source_id})
        [event] = await events.for_entity(store, "item", item.id)
        assert (event.from_state, event.to_state, event.actor, event.attempt, event.reason) == (
            None, "new", "system", 1, "fetched",
        )  # fmt: skip
    assert (await items.get(store, known.id)).payload == {"title": "old"}


async def test_a_chunk_moves_to_drafting_in_two_statements(store: db.Store, now: datetime) -> None:
    made = await _recorded(store, now, [f"g{n}" for n in range(20)])

    def unit(conn: backend.Conn) -> tuple[list[items.Item], dict[str, int]]:
        counted = statements.Counting(conn)
        return moves.start_drafting(counted, made, now), dict(counted.sent)

    moved, sent = await store.write(unit)
    assert sent == _with_events(store, {"items.move_many": 1}, "events.insert_many")
    assert [item.id for item in moved] == [item.id for item in made]
    deadline = now + timedelta(minutes=15)
    for item in moved:
        assert item == await items.get(store, item.id)
        assert (item.state, item.last_transition_at, item.deadline) == (S.DRAFTING, now, deadline)
        event = (await events.for_entity(store, "item", item.id))[-1]
        assert (event.from_state, event.to_state, event.actor, event.attempt) == (
            "new", "drafting", "system", 1,
        )  # fmt: skip


async def test_items_not_where_they_were_read_are_moved_or_refused_one_by_one(
    store: db.Store, now: datetime
) -> None:
    """An item drafted meanwhile is taken as it is (same attempt); one that entered
    drafting automatically within the floor waits; a failed one is not drafted."""
    made = await _recorded(store, now, ["a", "b", "c", "d"])
    a, b, c, d = made
    await store.write(items.transition_sync, a.id, S.DRAFTING, "system", now)
    await store.write(items.transition_sync, b.id, S.DRAFTING, "system", now)
    await store.write(items.transition_sync, b.id, S.FAILED, "system", now)
    await store.write(items.replay_sync, b.id, "operator:5", now, "again")
    await store.write(items.transition_sync, c.id, S.FAILED, "operator:5", now)
    b_new = await items.get(store, b.id)
    later = now + timedelta(seconds=2)
    unchanged = {i: await events.for_entity(store, "item", i) for i in (a.id, b.id, c.id)}

    moved = await store.write(moves.start_drafting, [a, b_new, c, d], later)

    assert [(item.id, item.state) for item in moved] == [(a.id, S.DRAFTING), (d.id, S.DRAFTING)]
    assert (await items.get(store, b.id)).state == S.NEW
    assert (await items.get(store, c.id)).state == S.FAILED
    for item_id, trail in unchanged.items():
        assert await events.for_entity(store, "item", item_id) == trail
    floor_passed = now + timedelta(seconds=5)
    [b_moved] = await store.write(moves.start_drafting, [b_new], floor_passed)
    assert (b_moved.state, b_moved.attempt) == (S.DRAFTING, 2)


async def test_a_throttled_chunk_writes_nothing(store: db.Store, now: datetime) -> None:
    [item] = await _recorded(store, now, ["a"])
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)
    await store.write(items.transition_sync, item.id, S.FAILED, "system", now)
    replayed = await store.write(items.replay_sync, item.id, "operator:5", now, "again")
    before = await snapshot.tables(store)
    later = now + timedelta(seconds=1)
    move = items.Move(replayed, S.DRAFTING, "system", later)
    [answer] = await store.write(items.apply, [move])
    assert isinstance(answer, items.Refused) and answer.why == "throttled"
    assert await snapshot.tables(store) == before


async def test_an_automatic_move_checks_its_floor_within_the_move(
    store: db.Store, now: datetime
) -> None:
    [item] = await _recorded(store, now, ["a"])

    def unit(conn: backend.Conn) -> dict[str, int]:
        counted = statements.Counting(conn)
        items.transition_sync(counted, item.id, S.DRAFTING, "system", now)
        return dict(counted.sent)

    sent = await store.write(unit)
    assert sent == _with_events(store, {"items.lock": 1, "items.move": 1}, "events.insert")


async def test_claimed_rows_come_back_from_the_claim_whole(store: db.Store, now: datetime) -> None:
    """A claim returns each row as a read gives it (a card with its draft's text), so
    no row is read a second time."""
    [item] = await _recorded(store, now, ["a"])
    await store.write(drafts.add_sync, item.id, drafts.Body("the draft", {"drafter": "x"}), now)

    def queue(conn: backend.Conn) -> None:
        payload = {"attempt": 1, "version": 1}
        outbox.enqueue_sync(conn, "card", outbox.OPERATORS, payload, now, item_id=item.id)
        outbox.enqueue_sync(conn, "dispatch", "news", payload, now, item_id=item.id)

    await store.write(queue)

    def claim(conn: backend.Conn) -> tuple[list[outbox.Row], dict[str, int]]:
        counted = statements.Counting(conn)
        kinds: list[outbox.Kind] = ["card", "dispatch"]
        rows = outbox.claim_due_sync(
            counted, outbox.Claimant("w1", timedelta(minutes=1)), now, kinds, 10
        )
        return rows, dict(counted.sent)

    rows, sent = await store.write(claim)
    assert sent == {"outbox.claim_due": 2}
    assert rows == [await store.read(outbox.get_sync, row.id) for row in rows]
    assert [(row.kind, row.payload.get("text")) for row in rows] == [
        ("card", "the draft"), ("dispatch", None),
    ]  # fmt: skip
