"""The dispatch worker: approved drafts out to a local webhook over real sockets, real SQLite."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from pipelines import dispatch
from pipelines.approval import flow, rule
from pipelines.config import spec
from pipelines.runs import engine
from pipelines.service import dispatcher, runtime, workers
from store import backend, db, drafts, items, outbox
from store.audit import events
from store.cluster import heartbeats
from store.items import machine
from store.items.machine import State
from store.review.followups import Shown
from store.upkeep import startup
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.webhook_server import Reply, WebhookServer
from tests.store import statements

PIPELINE = """
name: news
schedule: 5m
sources:
  - type: rss
    url: {feed}
    scope: s0
approval:
  window: 2h
  undo_window: 0s  # dispatched at once: these tests are about delivery
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
def pipeline(tmp_path: Path, feeds: FeedServer, hook: WebhookServer) -> spec.Pipeline:
    (tmp_path / "news.yaml").write_text(PIPELINE.format(feed=feeds.url("/feed.xml"), hook=hook.url))
    loaded = spec.load_dir(tmp_path)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    return loaded.pipelines["news"]


async def approved_item(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient, now: datetime
) -> items.Item:
    """Fetch, draft (template drafter) and approve one item; returns it approved."""
    eng = engine.Engine(store, {"news": pipeline}, client=client)
    await eng.tick("news", "schedule", now)
    [item] = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    decision = await flow.decide(
        store, pipeline, rule.Vote(Shown(item.id, item.attempt, item.version), 7, "approve"), now
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
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient, now: datetime
) -> int:
    return await dispatcher.run_once(store, {"news": pipeline}, client, now, rng=random.Random(1))


async def test_an_approved_draft_is_dispatched_once_with_its_key(
    store: db.Store,
    pipeline: spec.Pipeline,
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
    history = [e.to_state for e in await events.for_entity(store, "item", item.id)]
    assert history[-3:] == ["approved", "dispatching", "dispatched"]
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert (row.state, row.external_id) == ("sent", "1")
    assert await run(store, pipeline, client, now + timedelta(hours=1)) == 0
    assert len(hook.requests) == 1


async def test_a_forced_replay_is_a_new_attempt_with_a_new_key(
    store: db.Store,
    pipeline: spec.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)
    await run(store, pipeline, client, now)
    await store.write(
        items.replay_sync, item.id, "operator:7", now + timedelta(minutes=1), "again", force=True
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
    pipeline: spec.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    item = await approved_item(store, pipeline, client, now)
    # The webhook takes the delivery but the process dies before it records the answer.
    hook.script(Reply(200, b'{"id": "late"}', delay=30))
    crashed = asyncio.create_task(run(store, pipeline, client, now))
    await eventually(lambda: bool(hook.requests))
    crashed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await crashed
    await store.close()

    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        assert (await items.get(store, item.id)).state == State.DISPATCHING
        await startup.recover(store, now + timedelta(minutes=1))  # frees the dead claim
        assert await run(store, pipeline, client, now + timedelta(minutes=1)) == 1
        first, second = (r.headers["idempotency-key"] for r in hook.requests)
        assert first == second == dispatch.idempotency_key("news", item.id, 1, 1)
        history = [e.to_state for e in await events.for_entity(store, "item", item.id)]
        assert history.count("dispatching") == 1 and history[-1] == "dispatched"
    finally:
        await store.close()


async def test_a_transient_failure_is_retried_later_with_the_same_key(
    store: db.Store,
    pipeline: spec.Pipeline,
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
    pipeline: spec.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)
    hook.script(Reply(422, b"missing field"))
    await run(store, pipeline, client, now)
    failed = await items.get(store, item.id)
    assert failed.state == State.FAILED
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert last.reason is not None and "422" in last.reason and last.reason.startswith("dispatch:")
    [alert] = await outbox.due(store, now, ["alert"])
    assert "was not dispatched" in alert.payload["text"] and "422" in alert.payload["text"]
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert row.state == "failed" and len(hook.requests) == 1


async def test_what_a_destination_says_is_kept_as_text_every_backend_can_hold(
    store: db.Store,
    pipeline: spec.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    """PostgreSQL's text cannot hold NUL: an error body or an id with one is cleaned."""
    item = await approved_item(store, pipeline, client, now)
    hook.script(Reply(503, b"busy\x00now"), Reply(200, b'{"id": "m\\u0000 1"}'))
    await run(store, pipeline, client, now)
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert row.last_error is not None and "busy\ufffdnow" in row.last_error
    await run(store, pipeline, client, now + timedelta(hours=1))
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert (row.state, row.external_id) == ("sent", "m\ufffd 1")
    assert (await items.get(store, item.id)).state == State.DISPATCHED


async def test_transient_failures_give_up_after_max_attempts(
    store: db.Store,
    pipeline: spec.Pipeline,
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


class FakeRuntime:
    """The things the dispatch worker reads from pipelines.service.runtime.Runtime."""

    def __init__(
        self,
        store: db.Store,
        pipeline: spec.Pipeline,
        client: httpx.AsyncClient,
        now: datetime,
    ) -> None:
        self.store, self.pipelines, self.client = store, {"news": pipeline}, client
        self.workers = workers.Registry(store, lambda: now)
        self.me = heartbeats.Me.here()
        self.config = runtime.RuntimeConfig(db.StoreConfig(store.config.data_dir), Path())
        self._now = now

    def now(self) -> datetime:
        return self._now


async def test_the_worker_dispatches_until_stopped(
    store: db.Store,
    pipeline: spec.Pipeline,
    client: httpx.AsyncClient,
    hook: WebhookServer,
    now: datetime,
) -> None:
    item = await approved_item(store, pipeline, client, now)

    stop = asyncio.Event()
    fake = FakeRuntime(store, pipeline, client, now)
    task = asyncio.create_task(dispatcher.make_worker(poll_s=0.01)(fake, stop))
    for _ in range(POLLS):
        if (await items.get(store, item.id)).state == State.DISPATCHED:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await task
    assert (await items.get(store, item.id)).state == State.DISPATCHED
    assert len(hook.requests) == 1


# -- recovery paths: rows that outlived their item's state, and rows that keep failing --------


async def dispatch_row(store: db.Store, item: items.Item, now: datetime, **payload: int) -> int:
    """A dispatch row as a crash or an older process may have left it."""
    body = {"item_id": item.id, "attempt": item.attempt, "version": item.version, **payload}
    row_id = await outbox.enqueue(store, "dispatch", "news", body, now, item_id=item.id)
    assert row_id is not None
    return row_id


async def test_a_row_for_an_older_attempt_is_closed_as_stale_without_sending(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    item = await approved_item(store, pipeline, client, now)
    [queued] = await outbox.for_item(store, item.id, "dispatch")
    await outbox.mark_sent(store, queued.id, None, now)  # only the stale row is left
    stale = await dispatch_row(store, item, now, attempt=item.attempt - 1)
    events_before = len(await events.for_entity(store, "item", item.id))
    assert await run(store, pipeline, client, now) == 1
    row = await store.read(outbox.get_sync, stale)
    assert (row.state, row.last_error) == (
        "failed",
        f"stale: item is now at attempt {item.attempt}",
    )
    assert (await items.get(store, item.id)).state == State.APPROVED
    assert (
        len(await events.for_entity(store, "item", item.id)) == events_before
        and hook.requests == []
    )


async def test_a_row_whose_item_was_already_dispatched_is_closed_as_sent(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    item = await approved_item(store, pipeline, client, now)
    assert await run(store, pipeline, client, now) == 1
    # The item's commit landed; a crash kept the row's: here, a second pending row.
    leftover = await dispatch_row(store, item, now)
    events_before = len(await events.for_entity(store, "item", item.id))
    assert await run(store, pipeline, client, now) == 1
    assert (await store.read(outbox.get_sync, leftover)).state == "sent"
    assert (
        len(hook.requests) == 1
        and len(await events.for_entity(store, "item", item.id)) == events_before
    )


async def test_a_row_whose_item_failed_meanwhile_is_closed_with_the_items_reason(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    item = await approved_item(store, pipeline, client, now)
    hook.script(Reply(503, b"busy"))
    await run(store, pipeline, client, now)
    await store.write(
        items.transition_sync, item.id, State.BREACH, "sweep", now, reason="stuck past SLA"
    )
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert await run(store, pipeline, client, now + timedelta(hours=1)) == 1
    closed = await store.read(outbox.get_sync, row.id)
    assert (closed.state, closed.last_error) == ("failed", "stuck past SLA")
    assert len(hook.requests) == 1 and (await items.get(store, item.id)).state == State.BREACH


async def test_a_row_for_a_pipeline_no_longer_loaded_fails_its_item_with_an_alert(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    item = await approved_item(store, pipeline, client, now)
    assert await dispatcher.run_once(store, {}, client, now) == 1
    failed = await items.get(store, item.id)
    assert failed.state == State.FAILED
    assert failed.reason == "dispatch: pipeline 'news' is not loaded"
    [row] = await outbox.for_item(store, item.id, "dispatch")
    assert (row.state, row.last_error) == ("failed", "pipeline 'news' is not loaded")
    [alert] = await outbox.due(store, now, ["alert"])
    assert alert.payload["text"] == (
        f"❌ item {item.id} (news) was not dispatched: pipeline 'news' is not loaded"
    )
    assert hook.requests == []


async def test_an_item_back_in_dispatching_too_soon_waits_without_using_an_attempt(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    item = await approved_item(store, pipeline, client, now)
    hook.script(Reply(503, b"busy"))
    first = now + timedelta(seconds=6)  # drafting may be entered again from now + 5 s
    await run(store, pipeline, client, first)  # attempt 1 enters dispatching
    await store.write(
        items.transition_sync, item.id, State.FAILED, "system", first, reason="gave up"
    )
    second = first + timedelta(seconds=1)
    await store.write(items.replay_sync, item.id, "operator:7", second, "again")
    again = await approved_item(store, pipeline, client, second)
    row, old = await outbox.for_item(store, item.id, "dispatch")  # newest first
    soon = second + timedelta(seconds=1)
    assert await run(store, pipeline, client, soon) == 1
    waiting = await store.read(outbox.get_sync, row.id)
    assert (waiting.state, waiting.attempts) == ("pending", 0)
    assert waiting.next_attempt_at == soon + machine.FLOOR
    assert (await items.get(store, item.id)).state == State.APPROVED and len(hook.requests) == 1
    # Then it goes; attempt 1's row, due again too, is closed as stale.
    assert await run(store, pipeline, client, soon + machine.FLOOR) == 2
    assert (await items.get(store, again.id)).state == State.DISPATCHED
    assert (await store.read(outbox.get_sync, old.id)).state == "failed" and len(hook.requests) == 2


async def test_a_row_that_keeps_failing_unexpectedly_is_parked_and_the_rest_go_on(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    item = await approved_item(store, pipeline, client, now)
    # A row written by a bug: its payload lacks the version.
    broken = await outbox.enqueue(
        store, "dispatch", "news", {"item_id": item.id, "attempt": 1}, now, item_id=item.id
    )
    assert broken is not None
    registry = workers.Registry(store, lambda: now)
    at = now
    for _ in range(dispatch.MAX_ATTEMPTS):
        await dispatcher.run_once(
            store, {"news": pipeline}, client, at, rng=random.Random(1), report=registry.report
        )
        at = max(at, (await store.read(outbox.get_sync, broken)).next_attempt_at)
    parked = await store.read(outbox.get_sync, broken)
    assert (parked.state, parked.attempts) == ("failed", dispatch.MAX_ATTEMPTS)
    assert parked.last_error == (
        f"gave up after {dispatch.MAX_ATTEMPTS} attempts: unexpected BadPayload: "
        f"outbox row {broken}: dispatch payload: 'version' is missing"
    )
    # The good row went out on the first pass; the operators were told once.
    assert (await items.get(store, item.id)).state == State.DISPATCHED and len(hook.requests) == 1
    faults = [
        a for a in await outbox.due(store, at, ["alert"])
        if (a.dedupe_key or "").startswith("worker-fault:dispatcher:BadPayload")
    ]  # fmt: skip
    assert [a.payload["text"] for a in faults] == [
        f"⚠️ dispatcher: unexpected BadPayload on dispatch row {broken}. "
        "It keeps going; details in the log."
    ]


async def test_the_worker_sleeps_until_an_approval_commits(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    eng = engine.Engine(store, {"news": pipeline}, client=client)
    await eng.tick("news", "schedule", now)
    [item] = await items.in_state(store, State.AWAITING_APPROVAL, "news")

    stop = asyncio.Event()
    fake = FakeRuntime(store, pipeline, client, now)
    task = asyncio.create_task(dispatcher.make_worker(poll_s=3600)(fake, stop))
    await asyncio.sleep(0.2)  # it found nothing and sleeps: an hour, unless woken
    await flow.decide(
        store, pipeline, rule.Vote(Shown(item.id, item.attempt, item.version), 7, "approve"), now
    )
    await eventually(lambda: bool(hook.requests))
    stop.set()
    await asyncio.wait_for(task, 5)  # stop wakes it too
    assert (await items.get(store, item.id)).state == State.DISPATCHED


async def test_a_hanging_destination_holds_up_only_its_own_rows(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, feeds: FeedServer, tmp_path: Path, now: datetime,
) -> None:  # fmt: skip
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "files.yaml").write_text(
        f"name: files\nschedule: 5m\nsources:\n  - type: rss\n    url: {feeds.url('/feed.xml')}\n"
        f"    scope: s1\napproval:\n  undo_window: 0s\n"
        f"dispatch:\n  type: file\n  path: {tmp_path / 'out'}\n"
    )
    files = spec.load_dir(folder).pipelines["files"]
    # The webhook hangs until released, not for a while: no client timeout ends it first.
    patient = pipeline.dispatch.model_copy(update={"timeout": 300})
    both = {"news": pipeline.model_copy(update={"dispatch": patient}), "files": files}
    eng = engine.Engine(store, both, client=client)
    for name, p in both.items():
        await eng.tick(name, "schedule", now)
        [item] = await items.in_state(store, State.AWAITING_APPROVAL, name)
        await flow.decide(
            store, p, rule.Vote(Shown(item.id, item.attempt, item.version), 7, "approve"), now
        )
    hook.script(Reply(200, b'{"id": "slow"}', held=True))
    running = asyncio.create_task(dispatcher.run_once(store, both, client, now))
    try:
        # The file may be written before the webhook's request even arrives: wait for both.
        out = tmp_path / "out"
        await eventually(lambda: len(hook.requests) == 1 and any(out.glob("files-*.md")))
        # The file went out while the webhook's answer is still held back.
        assert len(await items.in_state(store, State.DISPATCHING, "news")) == 1
        assert not running.done()
    finally:
        hook.release()
    assert await running == 2
    assert [i.pipeline for i in await items.in_state(store, State.DISPATCHED)] == ["news", "files"]


async def test_a_closing_write_that_fails_is_retried_and_the_next_row_still_goes_out(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    feeds: FeedServer, hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    """A row's success is recorded while the next row starts; when that record fails
    (here the item was closed underneath during its call), the row is retried like any
    unexpected failure and the next row of the destination is not held back."""
    feeds.set("/feed.xml", rss([("a1", "One", "First story."), ("a2", "Two", "Second story.")]))
    eng = engine.Engine(store, {"news": pipeline}, client=client)
    await eng.tick("news", "schedule", now)
    first, second = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    for item in (first, second):
        await flow.decide(
            store, pipeline, rule.Vote(Shown(item.id, 1, item.version), 7, "approve"), now
        )
    body = b'{"id": "x"}'
    hook.script(Reply(200, body, {"Content-Type": "application/json"}, delay=0.3))
    running = asyncio.create_task(run(store, pipeline, client, now))
    await eventually(lambda: len(hook.requests) == 1)  # the first row's call is under way
    [first_row] = [r for r in await outbox.for_item(store, first.id, "dispatch")]
    await store.write(
        items.transition_sync, first.id, State.FAILED, "system", now, reason="closed elsewhere"
    )
    assert await running == 2
    assert (await items.get(store, second.id)).state == State.DISPATCHED
    retried = await store.read(outbox.get_sync, first_row.id)
    assert (retried.state, retried.attempts) == ("pending", 1)
    assert retried.last_error is not None and "unexpected IllegalTransition" in retried.last_error
    assert len(hook.requests) == 2


FILES = """
name: files
schedule: 5m
sources:
  - type: rss
    url: {feed}
    scope: s1
approval:
  undo_window: 0s
dispatch:
  type: file
  path: {out}
"""


async def approve_all(
    store: db.Store, name: str, pipeline: spec.Pipeline, client: httpx.AsyncClient, now: datetime
) -> list[items.Item]:
    """Fetch and draft the pipeline's feed, then approve every card, oldest first."""
    await engine.Engine(store, {name: pipeline}, client=client).tick(name, "schedule", now)
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, name)
    for item in waiting:
        await flow.decide(
            store, pipeline, rule.Vote(Shown(item.id, 1, item.version), 7, "approve"), now
        )
    return waiting


async def dispatch_trail(store: db.Store, found: list[items.Item]) -> list[tuple[str, int]]:
    """The (state, item) of every move into dispatching or dispatched, in commit order."""
    trail = [e for item in found for e in await events.for_entity(store, "item", item.id)]
    moves = [e for e in trail if e.to_state in (State.DISPATCHING, State.DISPATCHED)]
    return [(e.to_state, int(e.entity_id)) for e in sorted(moves, key=lambda e: e.id)]


async def test_a_local_destination_starts_its_rows_together_and_a_network_one_row_by_row(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    feeds: FeedServer, hook: WebhookServer, tmp_path: Path, now: datetime,
) -> None:  # fmt: skip
    feeds.set("/feed.xml", rss([(f"a{n}", f"Story {n}", f"Story {n} text.") for n in range(3)]))
    folder = tmp_path / "local"
    folder.mkdir()
    (folder / "files.yaml").write_text(
        FILES.format(feed=feeds.url("/feed.xml"), out=tmp_path / "out")
    )
    files = spec.load_dir(folder).pipelines["files"]
    local = await approve_all(store, "files", files, client, now)
    remote = await approve_all(store, "news", pipeline, client, now)
    both = {"news": pipeline, "files": files}
    assert await dispatcher.run_once(store, both, client, now) == 6
    # The files: one transaction moved all three to dispatching, before any was written.
    a, b, c = (item.id for item in local)
    assert await dispatch_trail(store, local) == [
        *[(State.DISPATCHING, i) for i in (a, b, c)],
        *[(State.DISPATCHED, i) for i in (a, b, c)],
    ]
    assert len(list((tmp_path / "out").glob("files-*.md"))) == 3
    # The webhook: each row starts just before its own call, so the third starts only
    # after the first call was answered and recorded.
    trail = await dispatch_trail(store, remote)
    first, third = remote[0].id, remote[2].id
    assert trail.index((State.DISPATCHING, third)) > trail.index((State.DISPATCHED, first))
    assert len(hook.requests) == 3 and all(state == State.DISPATCHED for state, _ in trail[-1:])


async def test_a_bad_row_among_rows_started_together_is_retried_and_the_others_go_out(
    store: db.Store, client: httpx.AsyncClient, feeds: FeedServer, tmp_path: Path,
    now: datetime,
) -> None:  # fmt: skip
    feeds.set("/feed.xml", rss([("a1", "One", "First."), ("a2", "Two", "Second.")]))
    (tmp_path / "files.yaml").write_text(
        FILES.format(feed=feeds.url("/feed.xml"), out=tmp_path / "out")
    )
    files = spec.load_dir(tmp_path).pipelines["files"]
    broken = await outbox.enqueue(  # a row written by a bug, first in line: it lacks the version
        store, "dispatch", "files", {"item_id": 1, "attempt": 1}, now
    )
    assert broken is not None
    first, second = await approve_all(store, "files", files, client, now)
    assert await dispatcher.run_once(store, {"files": files}, client, now) == 3
    for item in (first, second):
        assert (await items.get(store, item.id)).state == State.DISPATCHED
    retried = await store.read(outbox.get_sync, broken)
    assert (retried.state, retried.attempts) == ("pending", 1)
    assert retried.last_error is not None and "unexpected BadPayload" in retried.last_error


async def test_rows_start_together_without_a_savepoint_each(
    store: db.Store, client: httpx.AsyncClient, feeds: FeedServer, tmp_path: Path,
    now: datetime,
) -> None:  # fmt: skip
    """Two statements a row saved on a database server: a bad row rolls back the chunk,
    and each row then starts alone (the test above)."""
    feeds.set("/feed.xml", rss([("a1", "One", "First."), ("a2", "Two", "Second.")]))
    (tmp_path / "files.yaml").write_text(
        FILES.format(feed=feeds.url("/feed.xml"), out=tmp_path / "out")
    )
    files = spec.load_dir(tmp_path).pipelines["files"]
    await approve_all(store, "files", files, client, now)
    rows = await outbox.claim_due(
        store, outbox.Claimant("w1", dispatcher.LEASE), now, ["dispatch"], limit=50
    )

    def begin(conn: backend.Conn) -> tuple[list[dispatcher.Started], dict[str, int]]:
        counted = statements.Counting(conn)
        return dispatcher._begin_rows(counted, rows, True, now), dict(counted.sent)

    started, sent = await store.write(begin)
    assert len(started) == 2 and all(isinstance(s, tuple) for s in started)
    # The items, approved as their rows say, move together in one statement with no lock
    # before it, and their drafts are read in one more.
    assert "SAVEPOINT" not in sent and "items.lock" not in sent
    assert (sent["items.move_many"], sent["items.drafts"]) == (1, 1)
    assert "items.draft" not in sent
    for row, start in zip(rows, started, strict=True):
        assert isinstance(start, tuple)
        item, draft = start
        assert (item.id, item.state) == (row.item_id, State.DISPATCHING)
        assert draft == await store.read(drafts.get_sync, item.id, item.version)


async def test_rows_started_together_and_cut_off_by_a_crash_go_out_after_the_restart(
    data_dir: Path, client: httpx.AsyncClient, feeds: FeedServer, tmp_path: Path,
    now: datetime,
) -> None:  # fmt: skip
    feeds.set("/feed.xml", rss([(f"a{n}", f"Story {n}", f"Story {n} text.") for n in range(3)]))
    (tmp_path / "files.yaml").write_text(
        FILES.format(feed=feeds.url("/feed.xml"), out=tmp_path / "out")
    )
    files = spec.load_dir(tmp_path).pipelines["files"]
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    approved = await approve_all(store, "files", files, client, now)
    # The process dies just after the chunk's start committed, before any file is written.
    rows = await outbox.claim_due(
        store, outbox.Claimant("w1", dispatcher.LEASE), now, ["dispatch"], limit=50
    )
    started = await store.write(dispatcher._begin_rows, rows, True, now)
    assert len(started) == 3 and all(isinstance(s, tuple) for s in started)
    await store.close()

    later = now + timedelta(minutes=1)
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        for item in approved:
            assert (await items.get(store, item.id)).state == State.DISPATCHING
        await startup.recover(store, later)  # frees the dead worker's claims
        assert await dispatcher.run_once(store, {"files": files}, client, later) == 3
        for item in approved:
            history = [e.to_state for e in await events.for_entity(store, "item", item.id)]
            assert history.count("dispatching") == 1 and history[-1] == "dispatched"
        assert len(list((tmp_path / "out").glob("files-*.md"))) == 3
    finally:
        await store.close()
