"""The dispatch worker: approved drafts out to a local webhook over real sockets, real SQLite."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from pipelines import approval, config, dispatch, dispatcher, engine, workers
from store import db, items, outbox
from store.machine import State
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.webhook_server import Reply, WebhookServer

PIPELINE = """
name: news
schedule: 5m
sources:
  - type: rss
    url: {feed}
    scope: s0
approval:
  window: 2h
dispatch:
  type: webhook
  url: {hook}
  timeout: 5
"""


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set("/feed.xml", rss([("a1", "Launch", "The product launches on Monday.")]))
        yield server


@pytest.fixture
def hook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


@pytest.fixture
def pipeline(tmp_path: Path, feeds: FeedServer, hook: WebhookServer) -> config.Pipeline:
    (tmp_path / "news.yaml").write_text(PIPELINE.format(feed=feeds.url("/feed.xml"), hook=hook.url))
    loaded = config.load_dir(tmp_path)
    assert not loaded.errors, config.format_errors(loaded.errors)
    return loaded.pipelines["news"]


async def approved_item(
    store: db.Store, pipeline: config.Pipeline, client: httpx.AsyncClient, now: datetime
) -> items.Item:
    """Fetch, draft (template drafter) and approve one item; returns it approved."""
    eng = engine.Engine(store, {"news": pipeline}, client=client)
    await eng.tick("news", "schedule", now)
    [item] = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    decision = await approval.decide(
        store, pipeline, item.id, item.attempt, item.version, 7, "approve", now
    )
    assert decision.outcome == "approved"
    return decision.item


#: How many 10 ms looks a test takes before it gives up waiting (pytest-timeout is the backstop).
POLLS = 3000


async def eventually(check: Callable[[], bool]) -> None:
    for _ in range(POLLS):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def run(
    store: db.Store, pipeline: config.Pipeline, client: httpx.AsyncClient, now: datetime
) -> int:
    return await dispatcher.run_once(store, {"news": pipeline}, client, now, rng=random.Random(1))


async def test_an_approved_draft_is_dispatched_once_with_its_key(
    store: db.Store,
    pipeline: config.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)
    assert await run(store, pipeline, client, now) == 1
    [sent] = hook.requests
    assert sent.headers["idempotency-key"] == dispatch.idempotency_key("news", item.id, 1, 1)
    assert sent.json()["text"].startswith("Launch\n\nThe product launches on Monday.")
    done = await items.get(store, item.id)
    assert done.state == State.DISPATCHED
    history = [e.to_state for e in await items.history(store, item.id)]
    assert history[-3:] == ["approved", "dispatching", "dispatched"]
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert (row.state, row.external_id) == ("sent", "1")
    assert await run(store, pipeline, client, now + timedelta(hours=1)) == 0
    assert len(hook.requests) == 1


async def test_a_forced_replay_is_a_new_attempt_with_a_new_key(
    store: db.Store,
    pipeline: config.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)
    await run(store, pipeline, client, now)
    await items.replay(
        store, item.id, "operator:7", now + timedelta(minutes=1), "again", force=True
    )
    again = await approved_item(store, pipeline, client, now + timedelta(minutes=2))
    assert (again.attempt, again.version) == (2, 2)
    await run(store, pipeline, client, now + timedelta(minutes=3))
    first, second = (r.headers["idempotency-key"] for r in hook.requests)
    assert first != second
    assert second == dispatch.idempotency_key("news", item.id, 2, 2)
    assert (await items.get(store, item.id)).state == State.DISPATCHED


async def test_a_dispatch_retried_after_a_crash_sends_the_same_key(
    data_dir: Path,
    pipeline: config.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    store = await db.Store.open(db.StoreConfig(data_dir=data_dir))
    item = await approved_item(store, pipeline, client, now)
    # The webhook takes the delivery but the process dies before it records the answer.
    hook.script(Reply(200, b'{"id": "late"}', delay=30))
    crashed = asyncio.create_task(run(store, pipeline, client, now))
    await eventually(lambda: bool(hook.requests))
    crashed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await crashed
    await store.close()

    store = await db.Store.open(db.StoreConfig(data_dir=data_dir))
    try:
        assert (await items.get(store, item.id)).state == State.DISPATCHING
        assert await run(store, pipeline, client, now + timedelta(minutes=1)) == 1
        first, second = (r.headers["idempotency-key"] for r in hook.requests)
        assert first == second == dispatch.idempotency_key("news", item.id, 1, 1)
        history = [e.to_state for e in await items.history(store, item.id)]
        assert history.count("dispatching") == 1 and history[-1] == "dispatched"
    finally:
        await store.close()


async def test_a_transient_failure_is_retried_later_with_the_same_key(
    store: db.Store,
    pipeline: config.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)
    hook.script(Reply(503, b"busy", {"Retry-After": "900"}))
    await run(store, pipeline, client, now)
    assert (await items.get(store, item.id)).state == State.DISPATCHING
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert row.state == "pending" and row.attempts == 1
    assert row.next_attempt_at >= now + timedelta(seconds=900)
    assert row.last_error is not None and "503" in row.last_error
    assert await run(store, pipeline, client, now + timedelta(minutes=5)) == 0  # not due yet
    await run(store, pipeline, client, now + timedelta(minutes=20))
    assert (await items.get(store, item.id)).state == State.DISPATCHED
    first, second = (r.headers["idempotency-key"] for r in hook.requests)
    assert first == second


async def test_a_refusal_fails_the_item_with_the_reason_and_an_alert(
    store: db.Store,
    pipeline: config.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)
    hook.script(Reply(422, b"missing field"))
    await run(store, pipeline, client, now)
    failed = await items.get(store, item.id)
    assert failed.state == State.FAILED
    last = (await items.history(store, item.id))[-1]
    assert last.reason is not None and "422" in last.reason and last.reason.startswith("dispatch:")
    [alert] = await outbox.due(store, now, ["alert"])
    assert "was not dispatched" in alert.payload["text"] and "422" in alert.payload["text"]
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert row.state == "failed" and len(hook.requests) == 1


async def test_transient_failures_give_up_after_max_attempts(
    store: db.Store,
    pipeline: config.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)
    hook.script(*[Reply(500) for _ in range(dispatch.MAX_ATTEMPTS)])
    for n in range(dispatch.MAX_ATTEMPTS + 2):
        await run(store, pipeline, client, now + timedelta(hours=n))
    assert len(hook.requests) == dispatch.MAX_ATTEMPTS
    failed = await items.get(store, item.id)
    assert failed.state == State.FAILED and failed.reason is not None
    assert f"gave up after {dispatch.MAX_ATTEMPTS} attempts" in failed.reason
    assert len(await outbox.due(store, now + timedelta(days=1), ["alert"])) == 1


async def test_the_worker_dispatches_until_stopped(
    store: db.Store,
    pipeline: config.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)

    class FakeRuntime:  # the four things the worker reads from pipelines.runtime.Runtime
        def __init__(self) -> None:
            self.store, self.pipelines, self.client = store, {"news": pipeline}, client
            self.workers = workers.Registry(store, lambda: now)

        def now(self) -> datetime:
            return now

    stop = asyncio.Event()
    task = asyncio.create_task(dispatcher.make_worker(poll_s=0.01)(FakeRuntime(), stop))
    for _ in range(POLLS):
        if (await items.get(store, item.id)).state == State.DISPATCHED:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert (await items.get(store, item.id)).state == State.DISPATCHED
    assert len(hook.requests) == 1
