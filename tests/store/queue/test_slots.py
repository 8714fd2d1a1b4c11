"""Slots as rows: each change with its event, the fire claim, the queue's moves, the sweep."""

from __future__ import annotations

import pytest

from store import backend, db, errors
from store.audit import events
from store.queue import holdings, machine, slots
from store.queue.machine import SlotState
from store.queue.slots import Slot
from tests.store.queue.conftest import HOUR, T0, new_items

S = SlotState
LATE = T0 + machine.FLOOR
TIMES = [T0 + HOUR * n for n in range(1, 5)]


async def _window(store: db.Store, queued: int) -> tuple[list[Slot], list[int]]:
    """Four open slots of one schedule, the first `queued` of them holding an item."""

    def unit(conn: backend.Conn) -> tuple[list[Slot], list[int]]:
        made = slots.open_window_sync(conn, "city", TIMES, T0)
        ids = new_items(conn, queued, T0)
        for item_id in ids:
            holdings.assign_sync(conn, "city", item_id, "system", T0)
        return made, ids

    return await store.write(unit)


async def _held(store: db.Store) -> list[int | None]:
    return [s.item_id for s in await store.read(slots.upcoming_sync, "city", T0)]


async def _kinds(store: db.Store, slot_id: int) -> list[str]:
    found = await events.for_entity(store, "slot", slot_id)
    return [machine.parse_reason(e.reason or "")[0] for e in found]


async def test_opening_a_window_twice_opens_each_slot_once(store: db.Store) -> None:
    first = await slots.open_window(store, "city", TIMES, T0)
    again = await slots.open_window(store, "city", [*TIMES, T0 + HOUR * 9], T0)
    assert [s.slot_at for s in first] == TIMES
    assert [s.slot_at for s in again] == [T0 + HOUR * 9]
    assert all(s.state == S.OPEN and s.item_id is None for s in first)
    assert await _kinds(store, first[0].id) == ["opened"]


async def test_items_take_the_next_free_slots_first_in_first_out(store: db.Store) -> None:
    made, ids = await _window(store, 3)
    assert await _held(store) == [*ids, None]
    assert await _kinds(store, made[0].id) == ["opened", "scheduled"]
    again = await holdings.assign(store, "city", ids[0], "system", T0)
    assert again is not None and again.id == made[0].id  # a repeat places nothing twice
    assert await _kinds(store, made[0].id) == ["opened", "scheduled"]


async def test_a_new_item_never_jumps_a_gap_ahead_of_the_queue(store: db.Store) -> None:
    made, _ = await _window(store, 2)
    await store.write(
        lambda c: c.execute("UPDATE slots SET item_id = NULL WHERE id = ?", (made[0].id,))
    )
    late = await store.write(new_items, 1, T0, "late")
    placed = await holdings.assign(store, "city", late[0], "system", T0)
    assert placed is not None and placed.id == made[2].id


async def test_no_free_slot_places_nothing(store: db.Store) -> None:
    await _window(store, 4)
    late = await store.write(new_items, 1, T0, "late")
    assert await holdings.assign(store, "city", late[0], "system", T0) is None


async def test_a_slot_fires_once_and_a_second_claim_gets_nothing(store: db.Store) -> None:
    made, ids = await _window(store, 1)
    fired = await slots.fire(store, made[0].id, "scheduler", LATE)
    assert fired is not None and (fired.state, fired.item_id, fired.attempt) == (
        S.FIRING,
        ids[0],
        1,
    )
    assert await slots.fire(store, made[0].id, "scheduler", LATE + HOUR) is None
    delivered = await slots.deliver(store, made[0].id, ids[0], "system", LATE + HOUR)
    assert delivered.state == S.FIRED
    assert await _kinds(store, made[0].id) == ["opened", "scheduled", "fired", "delivered"]


async def test_an_empty_slot_fires_empty_and_says_so(store: db.Store) -> None:
    made, _ = await _window(store, 0)
    fired = await slots.fire(store, made[0].id, "scheduler", LATE)
    assert fired is not None and fired.state == S.FIRED and fired.item_id is None
    [*_, last] = await events.for_entity(store, "slot", made[0].id)
    assert last.reason == "fired_empty: nothing was queued for it"


async def test_a_fire_within_the_floor_is_refused_until_it_passes(store: db.Store) -> None:
    made, _ = await _window(store, 1)
    with pytest.raises(machine.Floored) as refused:
        await slots.fire(store, made[0].id, "scheduler", T0)
    assert refused.value.may_move_at == LATE
    assert (await store.read(slots.get_sync, made[0].id)).state == S.OPEN


async def test_swap_exchanges_two_items_and_a_stale_tap_changes_nothing(store: db.Store) -> None:
    made, ids = await _window(store, 3)
    await holdings.swap(store, made[0].id, made[1].id, (ids[0], ids[1]), "operator:7", T0)
    assert await _held(store) == [ids[1], ids[0], ids[2], None]
    await holdings.swap(store, made[0].id, made[1].id, (ids[0], ids[1]), "operator:7", T0)
    assert await _held(store) == [ids[1], ids[0], ids[2], None]  # the repeat: as it is
    with pytest.raises(machine.SlotConflict):
        await holdings.swap(store, made[1].id, made[2].id, (ids[1], ids[2]), "operator:7", T0)
    assert await _held(store) == [ids[1], ids[0], ids[2], None]
    assert await _kinds(store, made[0].id) == ["opened", "scheduled", "moved"]


async def test_next_slot_is_a_swap_with_an_empty_one(store: db.Store) -> None:
    made, ids = await _window(store, 3)
    await holdings.swap(store, made[2].id, made[3].id, (ids[2], None), "operator:7", T0)
    assert await _held(store) == [ids[0], ids[1], None, ids[2]]


async def test_pull_gives_its_slot_to_the_next_items(store: db.Store) -> None:
    made, ids = await _window(store, 3)
    left = await holdings.pull(store, ids[0], "operator:7", T0)
    assert left is not None and left.id == made[0].id and left.item_id == ids[1]
    assert await _held(store) == [ids[1], ids[2], None, None]
    assert await _kinds(store, made[0].id) == ["opened", "scheduled", "pulled", "moved"]
    assert await holdings.pull(store, ids[0], "operator:7", T0) is None


async def test_post_now_leaves_the_queue_as_a_pull_does(store: db.Store) -> None:
    made, ids = await _window(store, 2)
    await holdings.post_now(store, ids[1], "operator:7", T0)
    assert await _held(store) == [ids[0], None, None, None]
    assert (await _kinds(store, made[1].id))[-1] == "posted_now"


async def test_a_firing_item_cannot_be_pulled(store: db.Store) -> None:
    made, ids = await _window(store, 1)
    await slots.fire(store, made[0].id, "scheduler", LATE)
    with pytest.raises(errors.IllegalTransition, match="only an open slot"):
        await holdings.pull(store, ids[0], "operator:7", LATE)


async def test_a_failed_slot_walks_to_the_next_item_after_the_floor(store: db.Store) -> None:
    made, ids = await _window(store, 3)
    await slots.fire(store, made[0].id, "scheduler", LATE)
    failed = LATE + machine.FLOOR
    await slots.fail(store, made[0].id, ids[0], "system", failed, "chat not found")
    with pytest.raises(machine.Floored):
        await holdings.substitute(store, made[0].id, "system", failed)
    walked = await holdings.substitute(store, made[0].id, "system", failed + machine.FLOOR)
    assert (walked.state, walked.item_id, walked.attempt) == (S.FIRING, ids[1], 2)
    assert await _held(store) == [ids[1], ids[2], None, None]
    kinds = await _kinds(store, made[0].id)
    assert kinds[-3:] == ["fired", "fire_failed", "slot_substituted"]


async def test_a_walk_with_nothing_queued_fires_empty(store: db.Store) -> None:
    made, ids = await _window(store, 1)
    await slots.fire(store, made[0].id, "scheduler", LATE)
    await slots.fail(store, made[0].id, ids[0], "system", LATE + machine.FLOOR, "gone")
    walked = await holdings.substitute(store, made[0].id, "system", LATE + machine.FLOOR * 2)
    assert (walked.state, walked.item_id) == (S.FIRED, None)


async def test_an_expired_slot_hands_its_item_to_the_next_slots(store: db.Store) -> None:
    made, ids = await _window(store, 4)
    gone = await holdings.expire(store, made[0].id, "scheduler", LATE)
    assert gone.slot.state == S.EXPIRED and gone.unplaced == ids[3]
    assert await _held(store) == [
        ids[0],
        ids[0],
        ids[1],
        ids[2],
    ]  # the expired row keeps the item it held
    assert (await holdings.expire(store, made[0].id, "scheduler", LATE)).unplaced is None


async def test_the_sweep_breaches_a_stuck_slot_once_with_the_reason(store: db.Store) -> None:
    made, _ = await _window(store, 2)
    await slots.fire(store, made[0].id, "scheduler", LATE)
    assert await slots.sweep(store, LATE + machine.STUCK_AFTER) == []
    later = LATE + machine.STUCK_AFTER + machine.FLOOR
    [breached] = await slots.sweep(store, later)
    assert (breached.id, breached.state) == (made[0].id, S.BREACH)
    assert breached.reason is not None and "stuck in firing" in breached.reason
    assert await slots.sweep(store, later + HOUR) == []
    assert (await _kinds(store, made[0].id))[-1] == "sla_breach"


async def test_illegal_moves_and_conflicts_write_nothing(store: db.Store) -> None:
    made, ids = await _window(store, 2)
    before = await events.for_entity(store, "slot", made[0].id)
    with pytest.raises(errors.IllegalTransition):
        await slots.transition(store, made[0].id, S.SUBSTITUTING, ids[0], "system", LATE)
    with pytest.raises(machine.SlotConflict):
        await slots.transition(store, made[0].id, S.FIRING, ids[1], "system", LATE)
    assert await events.for_entity(store, "slot", made[0].id) == before
    with pytest.raises(errors.NotFound):
        await store.read(slots.get_sync, 999)
