"""The operator actions shared by Telegram and the CLI, without a running scheduler.

Each one either does exactly its work (a request recorded, an event with its actor) or
refuses with a message saying what is valid, and then every table is unchanged.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest

from pipelines import operations
from store import db, items, ledger
from store.audit import events
from store.intake import timetable
from store.items.machine import State
from tests import snapshot

KNOWN = ("news", "digest")


async def test_pause_resume_and_run_without_a_scheduler(store: db.Store, now: datetime) -> None:
    pause = operations.Scheduling("pause", "news", "cli")
    assert await operations.schedule(store, KNOWN, pause, now)
    assert not await operations.schedule(store, KNOWN, pause, now)  # already
    later = now + timedelta(minutes=1)
    run = operations.Scheduling("run", "news", "cli")
    assert await operations.schedule(store, KNOWN, run, later)
    state = (await timetable.all_states(store))["news"]
    assert (state.paused, state.run_requested_at) == (True, later)
    resume = operations.Scheduling("resume", "news", "operator:3")
    assert await operations.schedule(store, KNOWN, resume, now)
    trail = [
        (e.from_state, e.to_state, e.actor)
        for e in await events.for_entity(store, "pipeline", "news")
    ]
    assert trail == [("active", "paused", "cli"), ("paused", "active", "operator:3")]


@pytest.mark.parametrize(
    ("action", "name", "message"),
    [
        ("stop", "news", "unknown action 'stop'; valid: "),
        ("run", "nwes", "unknown pipeline 'nwes'. Did you mean news? Pipelines: digest, news"),
        ("run", "zzz", "unknown pipeline 'zzz'. Pipelines: digest, news"),
    ],
)
async def test_schedule_refusals_say_what_is_valid(
    store: db.Store, now: datetime, action: str, name: str, message: str
) -> None:
    before = await snapshot.tables(store)
    with pytest.raises(operations.Invalid, match=f"^{re.escape(message)}"):
        await operations.schedule(store, KNOWN, operations.Scheduling(action, name, "cli"), now)
    assert await snapshot.tables(store) == before


async def test_argument_refusals_write_nothing(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000), "cli", now)
    before = await snapshot.tables(store)
    refusals = [
        (
            operations.pipeline_runs(store, "news", now, 0),
            "the number of runs must be at least 1, not 0",
        ),
        (operations.sweep(store, now, days=0), "--days must be from 1 to 36500, not 0"),
        (operations.set_budget(store, "global", "week", "5", "cli", now), "week"),
        (operations.set_budget(store, "global", "day", "lots", "cli", now), "lots"),
        (operations.reconcile_claim(store, 1, "0.01", "  ", "cli", now), "evidence is required"),
    ]
    for call, message in refusals:
        with pytest.raises(operations.Invalid, match=re.escape(message)):
            await call
    assert await snapshot.tables(store) == before
    assert operations.check_pipeline("news", KNOWN) == "news"
    with pytest.raises(operations.Invalid, match="Pipelines: none configured"):
        operations.check_pipeline("news", ())


async def test_a_replay_without_a_scheduler_requests_a_run(store: db.Store, now: datetime) -> None:
    item = await store.write(items.create_sync, "news", "feed", "g", {"title": "t"}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.FAILED, "system", now, reason="boom")
    replayed = await operations.replay(store, operations.Replay(item.id, "cli"), now)
    assert (replayed.state, replayed.attempt, replayed.reason) == (
        State.NEW,
        2,
        "replayed by cli",
    )
    assert (await timetable.all_states(store))["news"].run_requested_at == now
