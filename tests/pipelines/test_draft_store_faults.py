"""A passing store fault while items draft is weather, not the items' fault: a full disk
(SQLite) or a lost connection (PostgreSQL) while the provider holds the calls leaves the
items in drafting, and once the store answers they reach their cards, each claim settled
once and the provider paid once per item. Real stores, a fake provider and feed on
sockets.

A full SQLite store is made with `PRAGMA max_page_count` on the writer's connection; a
lost PostgreSQL connection with `pg_terminate_backend` of the worker's connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from pipelines.runs import engine
from pipelines.service import scheduler
from store import db, errors, items, outbox
from store.intake import runs, timetable
from store.items.machine import State
from tests import pg_databases
from tests.e2e.test_storage_faults import NO_LIMIT, set_page_limit
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.llm_server import FakeLLM
from tests.pipelines.test_llm_drafter import PRICE, budget, provider_settings, write_pipeline
from tests.pipelines.test_resume_units import claim_states

ITEMS = 4
#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 30.0
#: A reply long enough that recording it needs pages a full store does not have.
REPLY = "A long draft. " * 850

Fault = Callable[[], Awaitable[None]]


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    entries = [(f"e{n}", f"Story {n}", f"What happened in story {n}.") for n in range(ITEMS)]
    with FeedServer() as server:
        server.set("/feed.xml", rss(entries))
        yield server


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    """The fake provider; it holds every call until `release` is set."""
    with FakeLLM() as server:
        release = threading.Event()

        def hold(moment: str, _request: object) -> None:
            if moment == "request":
                release.wait(WITHIN_S)

        server.observe = hold
        server.release = release  # type: ignore[attr-defined]
        for _ in range(ITEMS):
            server.queue_reply(REPLY)
        yield server


@pytest.fixture
async def pg_store(tmp_path: Path) -> AsyncIterator[tuple[db.Store, str]]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_draft_faults_{os.getpid()}"
    server.drop(name)
    url = server.create(name)
    opened = await db.open(db.StoreConfig(data_dir=tmp_path / "data", database_url=url))
    try:
        yield opened, url
    finally:
        await opened.close()
        server.drop(name)


async def until(check: Callable[[], bool]) -> None:
    for _ in range(int(WITHIN_S / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition did not come true in time")


async def draft_through(
    store: db.Store,
    tmp_path: Path,
    feeds: FeedServer,
    llm: FakeLLM,
    client: httpx.AsyncClient,
    now: datetime,
    fault: Fault,
    recover: Fault,
) -> None:
    """Draft ITEMS items; `fault` strikes while the provider holds every call."""
    pipeline = write_pipeline(tmp_path, feeds.url("/feed.xml"))
    await budget(store, now)
    async with providers.ProviderClient(provider_settings(llm)) as provider:
        drafter = llm_drafter.LlmDrafter(store, pipeline, provider, PRICE)
        rig = engine.Engine(store, {"news": pipeline}, client=client, drafter_for=lambda _: drafter)
        sched = scheduler.Scheduler(store, rig, {"news": pipeline})
        await sched.trigger("news", now)
        first = asyncio.create_task(sched.run_once(now))
        await until(lambda: llm.calls == ITEMS)
        await fault()
        llm.release.set()  # type: ignore[attr-defined]
        await first
        # Those whose writes met the fault wait in drafting (on PostgreSQL, a write on
        # a lane the fault did not cut went through); none failed.
        assert await items.in_state(store, State.DRAFTING, "news")
        assert not await items.in_state(store, State.FAILED, "news")
        assert set(await claim_states(store)) <= {"started", "settled"}
        await recover()
        later = now
        # The pipeline is next due in 5 minutes: the runs before are the follow-ups the
        # engine asked for. Each connection the fault cut fails once, then reconnects.
        for _ in range(4):
            later += timedelta(seconds=30)
            with contextlib.suppress(*errors.PASSING):
                await sched.run_once(later)
            if not await items.in_state(store, State.DRAFTING, "news"):
                break
        assert (await runs.recent_runs(store, "news"))[0].trigger == "manual"
    shown = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert len(shown) == ITEMS
    cards = {row.item_id for row in await outbox.due(store, later, ["card"])}
    assert cards == {item.id for item in shown}
    assert await claim_states(store) == ["settled"] * ITEMS
    assert llm.calls == ITEMS  # each reply was paid for once, and used


async def test_a_full_store_while_drafting_leaves_items_to_draft_once_room_returns(
    store: db.Store,
    tmp_path: Path,
    feeds: FeedServer,
    llm: FakeLLM,
    client: httpx.AsyncClient,
    now: datetime,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    await draft_through(
        store,
        tmp_path,
        feeds,
        llm,
        client,
        now,
        fault=lambda: set_page_limit(store, None),
        recover=lambda: set_page_limit(store, NO_LIMIT),
    )
    # One line for the episode (the store's), and no traceback.
    told = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert [r.name for r in told] == ["store.backends.writer"]
    assert "full" in told[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]


async def test_a_lost_connection_while_drafting_leaves_items_to_draft_once_it_is_back(
    pg_store: tuple[db.Store, str],
    tmp_path: Path,
    feeds: FeedServer,
    llm: FakeLLM,
    client: httpx.AsyncClient,
    now: datetime,
) -> None:
    store, url = pg_store

    async def cut() -> None:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

    async def nothing() -> None:
        return None

    await draft_through(store, tmp_path, feeds, llm, client, now, fault=cut, recover=nothing)


async def test_a_run_stopped_by_a_store_fault_is_asked_for_again(
    store: db.Store, tmp_path: Path, feeds: FeedServer, client: httpx.AsyncClient, now: datetime
) -> None:
    pipeline = write_pipeline(tmp_path, feeds.url("/feed.xml"))

    def busy(_: object) -> llm_drafter.LlmDrafter:
        raise errors.Busy()  # as a store fault met between two of the run's steps

    rig = engine.Engine(store, {"news": pipeline}, client=client, drafter_for=busy)
    with pytest.raises(errors.Busy):
        await rig.tick("news", "schedule", now)
    await rig.ask_owed_runs(now)  # what the scheduler does at each pass
    assert (await timetable.all_states(store))["news"].run_requested_at is not None
