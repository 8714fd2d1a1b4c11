"""Work shared by workers: dispatch rows claimed with a lease, one running run per
pipeline started by compare-and-set, runs of dead workers closed, updates handled once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from store import db, errors, outbox
from store.cluster import heartbeats
from store.intake import runs, timetable
from store.review import updates
from store.upkeep import retention, startup

LEASE = timedelta(seconds=30)


async def _rows(store: db.Store, n: int, now: datetime) -> list[int]:
    ids = []
    for i in range(n):
        row_id = await outbox.enqueue(store, "dispatch", "news", {"n": i}, now)
        assert row_id is not None
        ids.append(row_id)
    return ids


async def test_two_workers_claim_disjoint_rows(store: db.Store, now: datetime) -> None:
    ids = await _rows(store, 6, now)
    a, b = await asyncio.gather(
        outbox.claim_due(store, outbox.Claimant("a", LEASE), now, ["dispatch"], limit=4),
        outbox.claim_due(store, outbox.Claimant("b", LEASE), now, ["dispatch"], limit=4),
    )
    assert sorted(r.id for r in a + b) == ids
    assert not {r.id for r in a} & {r.id for r in b}
    assert await outbox.claim_due(store, outbox.Claimant("c", LEASE), now, ["dispatch"]) == []


async def test_a_dead_workers_rows_are_claimed_again_once_the_lease_lapses(
    store: db.Store, now: datetime
) -> None:
    ids = await _rows(store, 2, now)
    await outbox.claim_due(store, outbox.Claimant("dead", LEASE), now, ["dispatch"])
    assert (
        await outbox.claim_due(store, outbox.Claimant("b", LEASE), now + LEASE, ["dispatch"]) == []
    )
    later = now + LEASE + timedelta(milliseconds=1)
    taken = await outbox.claim_due(store, outbox.Claimant("b", LEASE), later, ["dispatch"])
    assert [r.id for r in taken] == ids


async def test_recording_an_outcome_ends_the_claim(store: db.Store, now: datetime) -> None:
    [row_id] = await _rows(store, 1, now)
    await outbox.claim_due(store, outbox.Claimant("a", LEASE), now, ["dispatch"])
    await outbox.mark_retry(store, row_id, "timeout", now + timedelta(seconds=1))
    retried = now + timedelta(seconds=1)
    [again] = await outbox.claim_due(store, outbox.Claimant("b", LEASE), retried, ["dispatch"])
    assert again.id == row_id and again.attempts == 1


async def test_claims_take_only_due_rows_of_the_kinds_asked(store: db.Store, now: datetime) -> None:
    await outbox.enqueue(store, "alert", outbox.ALERTS, {"text": "x"}, now)
    await outbox.enqueue(store, "dispatch", "news", {}, now + timedelta(minutes=1))
    assert await outbox.claim_due(store, outbox.Claimant("a", LEASE), now, ["dispatch"]) == []


def _seen(state: timetable.PipelineState | None) -> timetable.PipelineState:
    assert state is not None
    return state


async def test_a_due_run_is_started_by_one_worker_only(store: db.Store, now: datetime) -> None:
    await timetable.ensure(store, "news", now)
    seen = _seen((await timetable.all_states(store)).get("news"))
    nxt = now + timedelta(hours=1)
    first = await timetable.claim_run(store, seen, nxt, "schedule", now, hold=runs.Hold("a", LEASE))
    assert first is not None
    await runs.finish_run(store, first, "ok", runs.Counts(), None, now)
    # Another worker read the same row before the first claimed it: the slot is gone.
    again = await timetable.claim_run(store, seen, nxt, "schedule", now, hold=runs.Hold("b", LEASE))
    assert again is None
    state = _seen((await timetable.all_states(store)).get("news"))
    assert (state.next_due_at, state.last_started_at) == (nxt, now)


async def test_workers_racing_for_one_due_run_start_exactly_one(
    store: db.Store, now: datetime
) -> None:
    await timetable.ensure(store, "news", now)
    seen = _seen((await timetable.all_states(store)).get("news"))
    nxt = now + timedelta(hours=1)
    started = await asyncio.gather(
        *(
            timetable.claim_run(store, seen, nxt, "schedule", now, hold=runs.Hold(f"w{i}", LEASE))
            for i in range(8)
        )
    )
    assert len([s for s in started if s is not None]) == 1


async def test_a_pipeline_never_has_two_running_runs(store: db.Store, now: datetime) -> None:
    await runs.start_run(store, "news", "schedule", now, hold=runs.Hold("a"))
    with pytest.raises(errors.Conflict, match="running already"):
        await runs.start_run(store, "news", "manual", now, hold=runs.Hold("b"))
    # A manual request while it runs waits: nothing is claimed, the request stays.
    await timetable.request_run(store, "news", now)
    seen = _seen((await timetable.all_states(store)).get("news"))
    assert (
        await timetable.claim_run(store, seen, None, "manual", now, hold=runs.Hold("b", LEASE))
        is None
    )
    assert _seen((await timetable.all_states(store)).get("news")).run_requested_at == now


async def test_a_run_whose_worker_died_is_closed_when_its_lease_lapses(
    store: db.Store, now: datetime
) -> None:
    alive, dead = heartbeats.Me("alive", "h", 1), heartbeats.Me("dead", "h", 2)
    kept = await runs.start_run(store, "news", "schedule", now, hold=runs.Hold(alive.id, LEASE))
    left = await runs.start_run(store, "digest", "schedule", now, hold=runs.Hold(dead.id, LEASE))
    later = now + LEASE - timedelta(seconds=1)
    await heartbeats.beat(store, alive, later, LEASE, [kept])  # renews the run it runs
    assert await startup.recover_lapsed(store, later) == []
    closed = await startup.recover_lapsed(store, now + LEASE + timedelta(seconds=1))
    assert closed == ["digest"]
    run = await store.read(runs.get_sync, left)
    assert (run.status, run.error_text) == ("error", "interrupted: its worker stopped")
    assert (await store.read(runs.get_sync, kept)).status == "running"


async def test_startup_on_a_shared_store_closes_only_lapsed_runs(
    store: db.Store, now: datetime
) -> None:
    live = await runs.start_run(store, "news", "schedule", now, hold=runs.Hold("a", LEASE))
    await startup.recover(store, now + timedelta(seconds=1), exclusive=False)
    assert (await store.read(runs.get_sync, live)).status == "running"
    await startup.recover(store, now + timedelta(seconds=1))
    assert (await store.read(runs.get_sync, live)).status == "error"


@pytest.fixture
def pids() -> Iterator[tuple[int, int]]:
    """The pid of a process that ended, and of one still running."""
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield int(ended.stdout), living.pid
    living.kill()
    living.wait()


async def test_startup_closes_at_once_the_runs_of_a_process_on_this_host_that_is_gone(
    store: db.Store, now: datetime, pids: tuple[int, int]
) -> None:
    here, (dead_pid, live_pid) = heartbeats.Me.here(), pids
    workers = {
        "dead": heartbeats.Me("dead", here.host, dead_pid),
        "far": heartbeats.Me("far", "another-host", dead_pid),
        "alive": heartbeats.Me("alive", here.host, live_pid),
    }
    started = {}
    for (name, me), pipeline in zip(workers.items(), ("digest", "news", "mail"), strict=True):
        await heartbeats.beat(store, me, now, LEASE)
        started[name] = await runs.start_run(
            store, pipeline, "schedule", now, hold=runs.Hold(me.id, LEASE)
        )
    # Well within every lease: only the run whose process is gone is closed.
    await startup.recover(store, now + timedelta(seconds=1), exclusive=False)
    closed = await store.read(runs.get_sync, started["dead"])
    assert (closed.status, closed.error_text) == ("error", "interrupted: its worker stopped")
    assert (await store.read(runs.get_sync, started["far"])).status == "running"
    assert (await store.read(runs.get_sync, started["alive"])).status == "running"
    found = {w.id: w for w in await heartbeats.recent(store, now + timedelta(seconds=1))}
    assert found["dead"].stopped_at is not None and found["alive"].stopped_at is None


async def test_heartbeats_list_workers_and_say_who_is_alive(store: db.Store, now: datetime) -> None:
    a, b = heartbeats.Me("a", "host1", 10), heartbeats.Me("b", "host2", 20)
    await heartbeats.beat(store, a, now, LEASE)
    await heartbeats.beat(store, b, now + timedelta(seconds=1), LEASE)
    await heartbeats.stopped(store, a.id, now + timedelta(seconds=2))
    found = {w.id: w for w in await heartbeats.recent(store, now + timedelta(seconds=3))}
    assert set(found) == {"a", "b"}
    ttl = timedelta(seconds=6)
    assert not found["a"].alive(now + timedelta(seconds=3), ttl)
    assert found["b"].alive(now + timedelta(seconds=3), ttl)
    assert not found["b"].alive(now + timedelta(seconds=8), ttl)


async def test_an_update_is_handled_once(store: db.Store, now: datetime) -> None:
    assert await updates.first_time(store, 41, now)
    assert not await updates.first_time(store, 41, now + timedelta(seconds=1))
    firsts = await asyncio.gather(*(updates.first_time(store, 42, now) for _ in range(8)))
    assert firsts.count(True) == 1


async def test_handled_update_ids_are_pruned_once_telegram_cannot_resend_them(
    store: db.Store, now: datetime
) -> None:
    await updates.first_time(store, 1, now)
    await updates.first_time(store, 2, now + updates.KEEP)
    pruned = await retention.prune(store, now + updates.KEEP + timedelta(seconds=1))
    assert pruned.updates == 1
    assert await updates.first_time(store, 1, now + updates.KEEP)
    assert not await updates.first_time(store, 2, now + updates.KEEP)


async def test_a_beat_renews_only_the_runs_its_worker_still_runs(
    store: db.Store, now: datetime
) -> None:
    me = heartbeats.Me("me", "h", 1)
    live = await runs.start_run(store, "news", "schedule", now, hold=runs.Hold(me.id, LEASE))
    # A run whose tick crashed and could not even be closed: the worker no longer names it.
    stuck = await runs.start_run(store, "digest", "schedule", now, hold=runs.Hold(me.id, LEASE))
    later = now + LEASE - timedelta(seconds=1)
    await heartbeats.beat(store, me, later, LEASE, [live])
    assert await startup.recover_lapsed(store, now + LEASE + timedelta(seconds=1)) == ["digest"]
    assert (await store.read(runs.get_sync, stuck)).status == "error"
    assert (await store.read(runs.get_sync, live)).status == "running"
