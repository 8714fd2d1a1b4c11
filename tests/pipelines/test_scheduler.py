"""The scheduler against a real store: catch-up, no overlap, pause across restarts."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from pipelines.config import spec
from pipelines.runs import engine
from pipelines.service import scheduler
from store import db, errors
from store.audit import events
from store.cluster import heartbeats
from store.intake import runs
from tests import snapshot
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss

YAML = """
name: {name}
schedule: "{schedule}"
misfire_window: 1h
sources:
  - type: rss
    url: {url}
    scope: feed
dispatch:
  type: none
"""


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set("/feed.xml", rss([("a", "A", "a")]))
        yield server


def load(
    tmp_path: Path, feeds: FeedServer, schedule: str = "5m", name: str = "news"
) -> dict[str, spec.Pipeline]:
    (tmp_path / f"{name}.yaml").write_text(
        YAML.format(name=name, schedule=schedule, url=feeds.url("/feed.xml"))
    )
    loaded = spec.load_dir(tmp_path)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    return loaded.pipelines


def make(
    store: db.Store, pipelines: dict[str, spec.Pipeline], client: httpx.AsyncClient
) -> scheduler.Scheduler:
    eng = engine.Engine(store, pipelines, client=client)
    return scheduler.Scheduler(store, eng, pipelines, rng=random.Random(1))


async def started_runs(store: db.Store) -> list[datetime]:
    return [r.started_at for r in reversed(await runs.recent_runs(store, "news", 100))]


async def test_runs_when_due_and_not_before(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    sched = make(store, load(tmp_path, feeds), client)
    assert await sched.run_once(now) == ["news"]  # an interval pipeline starts right away
    assert await sched.run_once(now + timedelta(minutes=4)) == []
    assert await sched.run_once(now + timedelta(minutes=5)) == ["news"]
    state = (await sched.states())["news"]
    assert state.last_started_at == now + timedelta(minutes=5)
    assert state.next_due_at == now + timedelta(minutes=10)


async def test_catch_up_after_downtime_runs_once(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    sched = make(store, load(tmp_path, feeds), client)
    await sched.run_once(now)
    # Down for 40 minutes: eight slots missed, one coalesced run, next slot from now.
    back = now + timedelta(minutes=40)
    assert await sched.run_once(back) == ["news"]
    assert await sched.run_once(back + timedelta(seconds=1)) == []
    assert await started_runs(store) == [now, back]
    assert (await sched.states())["news"].next_due_at == back + timedelta(minutes=5)


async def test_missed_beyond_the_misfire_window_is_skipped(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    sched = make(store, load(tmp_path, feeds), client)
    await sched.run_once(now)
    back = now + timedelta(hours=5)
    assert await sched.run_once(back) == []
    assert (await sched.states())["news"].next_due_at == back + timedelta(minutes=5)
    assert await sched.run_once(back + timedelta(minutes=5)) == ["news"]


async def test_never_two_runs_of_one_pipeline_at_once(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    feeds.set("/feed.xml", "", hang=True)  # the fetch hangs until the server stops
    pipelines = load(tmp_path, feeds)
    sched = make(store, pipelines, client)
    assert await sched.run_once(now, wait=False) == ["news"]
    await sched.trigger("news", now)
    assert await sched.run_once(now + timedelta(minutes=10), wait=False) == []
    assert sched.running("news")
    assert len(await runs.recent_runs(store, "news")) == 1
    feeds.set("/feed.xml", rss([]))
    for task in list(sched._running.values()):
        task.cancel()
    await asyncio.gather(*sched._running.values(), return_exceptions=True)


async def test_pause_survives_a_restart(
    data_dir: Path, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    pipelines = load(tmp_path, feeds)
    first = await db.open(db.StoreConfig(data_dir=data_dir))
    sched = make(first, pipelines, client)
    await sched.run_once(now)
    assert await sched.pause("news", "operator:9", now) is True
    assert await sched.pause("news", "operator:9", now) is False
    await first.close()

    second = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        restarted = make(second, pipelines, client)
        assert await restarted.run_once(now + timedelta(minutes=30)) == []
        assert (await restarted.states())["news"].paused
        history = await events.for_entity(second, "pipeline", "news")
        assert [(e.from_state, e.to_state, e.actor) for e in history] == [
            ("active", "paused", "operator:9")
        ]
        await restarted.resume("news", "operator:9", now + timedelta(minutes=31))
        assert await restarted.run_once(now + timedelta(minutes=31)) == ["news"]
    finally:
        await second.close()


async def test_manual_trigger_runs_a_manual_pipeline(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    sched = make(store, load(tmp_path, feeds, schedule="manual"), client)
    assert await sched.run_once(now + timedelta(days=3)) == []
    await sched.trigger("news", now)
    assert await sched.run_once(now) == ["news"]
    assert (await runs.recent_runs(store, "news"))[0].trigger == "manual"
    assert await sched.run_once(now + timedelta(minutes=1)) == []


async def test_unknown_pipeline_names_the_known_ones(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    sched = make(store, load(tmp_path, feeds), client)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.NotFound, match="known: news"):
        await sched.trigger("newz", now)
    assert await snapshot.tables(store) == unchanged


async def test_pipelines_due_together_spread_over_the_live_workers(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    """Four pipelines due at once and two live workers: each worker runs two. A worker
    that stopped, and one not heard from for longer than a run's lease, take none."""
    feeds.set("/feed.xml", "", hang=True)  # runs last until the test ends them
    for name in ("a", "b", "c", "d"):
        load(tmp_path, feeds, name=name)
    pipelines = spec.load_dir(tmp_path).pipelines
    live, stopped, silent = [heartbeats.Me(f"host:{pid}:w", "host", pid) for pid in (1, 2, 3)]
    for me in (live, stopped):
        await heartbeats.beat(store, me, now, runs.DEFAULT_LEASE)
    await heartbeats.stopped(store, stopped.id, now)
    await heartbeats.beat(store, silent, now - 2 * runs.DEFAULT_LEASE, runs.DEFAULT_LEASE)
    other = heartbeats.Me("host:4:w", "host", 4)
    await heartbeats.beat(store, other, now, runs.DEFAULT_LEASE)
    eng = engine.Engine(store, pipelines, client=client)
    first, second = (
        scheduler.Scheduler(store, eng, pipelines, hold=runs.Hold(me.id)) for me in (live, other)
    )
    try:
        assert await first.run_once(now, wait=False) == ["a", "b"]
        assert await first.run_once(now, wait=False) == []
        assert await second.run_once(now, wait=False) == ["c", "d"]
    finally:
        tasks = [*first._running.values(), *second._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
