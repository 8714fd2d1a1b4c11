"""A clean stop starts no paid call: drafts that wait for a turn of the model's client
when the stop begins (choice.Drafters.park) hold nothing and call nothing; those already
at the provider finish. Real SQLite, the fake provider and feed on sockets; the whole
process under SIGTERM is tests/e2e/test_clean_stop.py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from pipelines.drafting import choice
from pipelines.runs import engine
from store import db, items
from store.items.machine import State
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.llm_server import FakeLLM
from tests.pipelines.test_llm_drafter import (
    MODEL,
    PRICE,
    budget,
    claim_rows,
    provider_settings,
    write_pipeline,
)

TURNS = 2
ENTRIES = 6


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


async def test_drafts_waiting_for_a_turn_begin_nothing_once_the_stop_began(
    store: db.Store, tmp_path: Path, feeds: FeedServer, client: httpx.AsyncClient, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([(f"e{n}", f"Story {n}", f"Body {n}.") for n in range(ENTRIES)]))
    pipeline = write_pipeline(tmp_path, feeds.url("/feed.xml"))
    await budget(store, now)
    with FakeLLM(delay_s=0.5) as llm:
        settings = provider_settings(llm, max_concurrent_calls=TURNS)
        chooser = choice.Drafters(settings, {MODEL: PRICE})
        drafting = engine.Engine(
            store, {pipeline.name: pipeline}, client=client, drafter_for=lambda p: chooser(store, p)
        )
        try:
            ticking = asyncio.ensure_future(drafting.tick("news", "schedule", now))
            while llm.calls < TURNS:
                assert not ticking.done(), "the tick ended before its first calls"
                await asyncio.sleep(0.01)
            drafting.park()  # as Runtime.take_no_new_work does
            chooser.park()
            await ticking
        finally:
            await chooser.aclose()
    assert llm.calls == TURNS
    assert [state for _, state in await claim_rows(store)] == ["settled"] * TURNS
    drafted = await items.in_state(store, State.AWAITING_APPROVAL, "news", limit=20)
    waiting = await items.in_state(store, State.DRAFTING, "news", limit=20)
    assert (len(drafted), len(waiting)) == (TURNS, ENTRIES - TURNS)
    assert all(item.attempt == 1 for item in waiting)
