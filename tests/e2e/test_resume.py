"""A SIGKILL while a batch is drafting or dispatching: after a restart nothing is orphaned
and nothing is paid twice.

The child is this module run as `python -m tests.e2e.test_resume ...`. It opens the store and
runs one real tick (the real LlmDrafter against the FakeLLM the test serves, one call at a
time so each kill point names one item's state) or one dispatcher pass, and dies by
SIGKILL: at a named point it sends the signal to itself (after the provider answered,
after the claim was reserved), or the test sends it while a call or delivery hangs. The
restart is the real Runtime: startup recovery asks for a run, and its tick resumes.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from bot.chat import alerts as bot_alerts
from pipelines.approval import flow, rule
from pipelines.config import spec
from pipelines.drafting import choice, moves
from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from pipelines.runs import engine
from pipelines.service import dispatcher, runtime
from store import db, drafts, items, ledger, outbox
from store.intake import runs, timetable
from store.items.machine import State
from store.ledger import outputs as llm_outputs
from store.ledger.machine import ClaimState
from store.review.followups import Shown
from store.upkeep import startup
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.llm_server import FakeLLM
from tests.fakes.webhook_server import Reply, WebhookServer
from tests.pipelines.test_llm_drafter import MODEL, PRICE, write_pipeline

ROOT = Path(__file__).resolve().parents[2]
#: 10 ms looks before a wait gives up (pytest-timeout is the backstop).
POLLS = 3000
ITEMS = 5
#: The child kills itself at this item's kill point (items are drafted in order).
KILL_AT = 3


def settings_for(base_url: str) -> providers.ProviderSettings:
    return providers.ProviderSettings(
        kind="openai", base_url=base_url, api_key=SecretStr("k"), model=MODEL, timeout_s=60
    )


def _kill_self_at(point: str) -> None:
    """SIGKILL this process when the KILL_AT-th item reaches `point`."""
    if point in ("none", "batch"):
        return
    module: Any = moves if point == "answered" else ledger
    name = "to_approval" if point == "answered" else "start_provider"
    original = getattr(module, name)
    seen = itertools.count(1)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if next(seen) == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)

    setattr(module, name, wrapper)


async def _child(
    kind: str, data_dir: str, pipelines_dir: str, url: str, point: str, now: str
) -> None:
    at = datetime.fromisoformat(now)
    pipeline = spec.load_dir(Path(pipelines_dir)).pipelines["news"]
    store = await db.open(db.StoreConfig(data_dir=Path(data_dir)))
    async with httpx.AsyncClient() as client:
        if kind == "dispatch":
            await dispatcher.run_once(store, {"news": pipeline}, client, at)
            raise SystemExit("the delivery finished; the test expected to kill this process")
        if point != "batch":  # one call at a time: the kill point names one item's state
            engine.CONCURRENCY = 1
        _kill_self_at(point)
        async with providers.ProviderClient(settings_for(url)) as provider:
            drafter = llm_drafter.LlmDrafter(store, pipeline, provider, PRICE)
            eng = engine.Engine(
                store, {"news": pipeline}, client=client, drafter_for=lambda _: drafter
            )
            await eng.tick("news", "schedule", at)
    raise SystemExit("the tick finished; the kill point was never reached")


async def start_child(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.e2e.test_resume", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def until(check: Callable[[], bool], child: asyncio.subprocess.Process) -> None:
    for _ in range(POLLS):
        if check():
            return
        if child.returncode is not None:
            _, err = await child.communicate()
            pytest.fail(f"the child exited early ({child.returncode}): {err.decode()[-2000:]}")
        await asyncio.sleep(0.01)
    pytest.fail("the child never reached the point to kill it at")


async def killed(child: asyncio.subprocess.Process) -> None:
    """Wait for the child's own SIGKILL (or send it) and check that is how it ended."""
    try:
        _, err = await asyncio.wait_for(child.communicate(), 30)
    except TimeoutError:
        child.send_signal(signal.SIGKILL)
        _, err = await child.communicate()
    assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    entries = [(f"e{n}", f"Story {n}", f"What happened in story {n}.") for n in range(ITEMS)]
    with FeedServer() as server:
        server.set("/feed.xml", rss(entries))
        yield server


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
async def setup(data_dir: Path, tmp_path: Path, feeds: FeedServer, now: datetime) -> Path:
    """The pipeline files and a store with a budget; returns the pipelines directory."""
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    write_pipeline(pipelines_dir, feeds.url("/feed.xml"))
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    await ledger.set_budget(store, ledger.Limit("global", "month", 10_000_000), "cli", now)
    # As the scheduler leaves it: the pipeline is known, its next run due in a day, so
    # only startup recovery's request runs it at the restart.
    await timetable.ensure(store, "news", now + timedelta(days=1))
    await store.close()  # one writer: the child takes the lock
    return pipelines_dir


async def restart(data_dir: Path, pipelines_dir: Path, llm: FakeLLM, at: datetime) -> db.Store:
    """Run the real Runtime until nothing is left in new or drafting but held items."""
    choose = choice.Drafters(settings_for(llm.base_url), {MODEL: PRICE})
    cfg = runtime.RuntimeConfig(
        store=db.StoreConfig(data_dir=data_dir),
        pipelines_dir=pipelines_dir,
        clock=lambda: at,
        drafter_for=choose,
        workers=(choose.worker,),
    )
    rt = await runtime.Runtime.start(cfg)
    try:
        for _ in range(POLLS):
            recorded = await runs.recent_runs(rt.store, "news", 5)
            if any(r.started_at == at and r.status != "running" for r in recorded):
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the restart never ran the pipeline")
    finally:
        await rt.stop()
    return await db.open(db.StoreConfig(data_dir=data_dir))


async def paid_once(store: db.Store) -> list[ledger.Claim]:
    """Every claim, after checking none was settled twice and each item has one claim."""
    rows = await store.read(lambda c: c.execute("SELECT id FROM claims ORDER BY id").fetchall())
    claims = [await ledger.get(store, row[0]) for row in rows]
    settled = await store.read(
        lambda c: c.execute(
            "SELECT entity_id, count(*) FROM events WHERE entity = 'claim' "
            "AND to_state = 'settled' GROUP BY entity_id"
        ).fetchall()
    )
    assert all(count == 1 for _, count in settled)
    assert len({claim.item_id for claim in claims}) == len(claims)
    return claims


async def alerts_about(store: db.Store, item_id: int, at: datetime) -> list[str]:
    texts = [bot_alerts.row_text(alert) for alert in await outbox.due(store, at, ["alert"])]
    return [text for text in texts if f"item {item_id}" in text]


async def in_state(store: db.Store, state: State) -> list[items.Item]:
    return await items.in_state(store, state, "news")


@pytest.mark.parametrize("point", ["answered", "reserved"])
async def test_a_kill_while_drafting_resumes_every_item_paying_once(
    data_dir: Path, setup: Path, llm: FakeLLM, now: datetime, point: str
) -> None:
    child = await start_child(
        "draft", str(data_dir), str(setup), llm.base_url, point, now.isoformat()
    )
    await killed(child)
    assert llm.calls == (KILL_AT if point == "answered" else KILL_AT - 1)

    store = await restart(data_dir, setup, llm, now + timedelta(minutes=1))
    try:
        waiting = await in_state(store, State.AWAITING_APPROVAL)
        assert len(waiting) == ITEMS and {item.attempt for item in waiting} == {1}
        assert await in_state(store, State.DRAFTING) == []
        assert llm.calls == ITEMS  # provider calls equal items: nothing paid twice
        claims = await paid_once(store)
        assert [c.state for c in claims] == [ClaimState.SETTLED] * ITEMS
        [budget] = (await ledger.report(store, now)).budgets
        spent = sum(c.actual_micros or 0 for c in claims)
        assert (budget.spent_micros, budget.held_micros) == (spent, 0)
        shown = {(await drafts.get(store, i.id, 1)).provenance["claim"] for i in waiting}
        assert shown == {c.id for c in claims}
        if point == "answered":  # the third item's kept reply became its draft, unpaid again
            third = sorted(waiting, key=lambda i: i.id)[KILL_AT - 1]
            output = await llm_outputs.get(
                store, (await drafts.get(store, third.id, 1)).provenance["claim"]
            )
            assert output is not None and output.request_id == "req_fake_000003"
        [crashed] = [r for r in await runs.recent_runs(store, "news", 5) if r.trigger == "schedule"]
        assert (crashed.status, crashed.error_text) == ("error", "interrupted")
    finally:
        await store.close()


async def test_a_kill_during_a_call_holds_that_item_and_resumes_the_rest(
    data_dir: Path, setup: Path, llm: FakeLLM, now: datetime
) -> None:
    for n in range(1, KILL_AT):
        llm.queue_reply(f"DRAFT number {n}")
    llm.queue_fault("timeout", hold_s=60)  # the third call hangs until the kill
    child = await start_child(
        "draft", str(data_dir), str(setup), llm.base_url, "none", now.isoformat()
    )
    await until(lambda: llm.calls == KILL_AT, child)
    child.send_signal(signal.SIGKILL)
    await killed(child)

    later = now + timedelta(minutes=1)
    store = await restart(data_dir, setup, llm, later)
    try:
        assert len(await in_state(store, State.AWAITING_APPROVAL)) == ITEMS - 1
        [held] = await in_state(store, State.DRAFTING)
        assert llm.calls == ITEMS  # the call that may have been charged is not made again
        claims = await paid_once(store)
        [uncertain] = [c for c in claims if c.state == ClaimState.UNCERTAIN]
        assert uncertain.item_id == held.id
        assert [c.state for c in claims].count(ClaimState.SETTLED) == ITEMS - 1
        await ledger.recover(store, later)  # claim recovery's next pass tells the episode
        told = await alerts_about(store, held.id, later)
        assert len(told) == 1
        assert f"item {held.id} waits in drafting until this claim is settled" in told[0]
        assert told[0].startswith("💸 1 call was cut off") and "Not charged" in told[0]
    finally:
        await store.close()

    # Restarting again neither calls nor tells the operators a second time.
    store = await restart(data_dir, setup, llm, later + timedelta(minutes=1))
    try:
        assert len(await alerts_about(store, held.id, later)) == 1
        assert llm.calls == ITEMS
        assert [i.id for i in await in_state(store, State.DRAFTING)] == [held.id]
    finally:
        await store.close()


async def test_a_kill_at_any_moment_of_a_big_batch_never_calls_twice_for_an_item(
    data_dir: Path, setup: Path, feeds: FeedServer, now: datetime
) -> None:
    batch = 40
    feeds.set("/feed.xml", rss([(f"b{n}", f"Story {n}", f"Body {n}.") for n in range(batch)]))
    with FakeLLM(delay_s=0.3) as llm:  # slow: up to 32 calls are in flight at once
        child = await start_child(
            "draft", str(data_dir), str(setup), llm.base_url, "batch", now.isoformat()
        )
        await until(lambda: llm.calls > 0, child)
        await asyncio.sleep(0.35)  # the first replies are recorded, the second wave is sent
        child.send_signal(signal.SIGKILL)
        await killed(child)
        store = await restart(data_dir, setup, llm, now + timedelta(minutes=1))
    try:
        waiting = await in_state(store, State.AWAITING_APPROVAL)
        held = await in_state(store, State.DRAFTING)
        assert len(waiting) + len(held) == batch and await in_state(store, State.NEW) == []
        # At most one call per item: a claim whose call may have left (some were still
        # queued for a connection at the kill) holds its item rather than calling again.
        # (A request cut short by the kill arrives as text, not JSON: counted, not parsed.)
        bodies = [request.body for request in llm.requests]
        prompts = [body["messages"][-1]["content"] for body in bodies if isinstance(body, dict)]
        assert len(set(prompts)) == len(prompts) and llm.calls <= batch
        assert llm.calls >= len(waiting)
        claims = await paid_once(store)
        assert len(claims) == batch
        by_item = {claim.item_id: claim.state for claim in claims}
        assert {by_item[item.id] for item in waiting} == {ClaimState.SETTLED}
        assert {by_item[item.id] for item in held} <= {ClaimState.UNCERTAIN}
    finally:
        await store.close()


DISPATCH_PIPELINE = """
name: news
schedule: 5m
sources:
  - type: rss
    url: {feed}
    scope: s0
approval:
  window: 2h
  undo_window: 0s
dispatch:
  type: webhook
  url: {hook}
  timeout: 60
"""


async def test_a_kill_while_dispatching_resumes_with_the_same_key(
    data_dir: Path, tmp_path: Path, feeds: FeedServer, now: datetime
) -> None:
    with WebhookServer() as hook:
        (tmp_path / "news.yaml").write_text(
            DISPATCH_PIPELINE.format(feed=feeds.url("/feed.xml"), hook=hook.url)
        )
        pipeline = spec.load_dir(tmp_path).pipelines["news"]
        store = await db.open(db.StoreConfig(data_dir=data_dir))
        async with httpx.AsyncClient() as client:
            await engine.Engine(store, {"news": pipeline}, client=client).tick(
                "news", "schedule", now
            )
            first = (await in_state(store, State.AWAITING_APPROVAL))[0]
            await flow.decide(store, pipeline, rule.Vote(Shown(first.id, 1, 1), 7, "approve"), now)
        await store.close()

        hook.script(Reply(200, delay=60))  # the delivery hangs until the kill
        child = await start_child(
            "dispatch", str(data_dir), str(tmp_path), "-", "-", now.isoformat()
        )
        await until(lambda: len(hook.requests) == 1, child)
        child.send_signal(signal.SIGKILL)
        await killed(child)

        store = await db.open(db.StoreConfig(data_dir=data_dir))
        try:
            assert (await items.get(store, first.id)).state == State.DISPATCHING
            async with httpx.AsyncClient() as client:
                later = now + timedelta(minutes=1)
                await startup.recover(store, later)  # as a restart does: frees the dead claim
                await dispatcher.run_once(store, {"news": pipeline}, client, later)
            assert (await items.get(store, first.id)).state == State.DISPATCHED
            sent, again = hook.requests
            assert sent.headers["idempotency-key"] == again.headers["idempotency-key"]
            assert sent.body == again.body
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(_child(*sys.argv[1:]))
