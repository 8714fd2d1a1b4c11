"""Resume and per-item fault isolation inside one process: real SQLite, a fake provider
and feed on sockets. The SIGKILL versions are in tests/e2e/test_resume.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from bot.chat import alerts as bot_alerts
from bot.chat import render
from bot.ground import callbacks
from pipelines import operations
from pipelines.approval import sla
from pipelines.config import spec
from pipelines.drafting import calls, drafters
from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from pipelines.runs import engine
from store import db, drafts, errors, items, ledger, outbox
from store.audit import events
from store.intake import runs, timetable
from store.items.machine import State
from store.ledger import claims
from store.ledger import outputs as llm_outputs
from store.ledger.machine import ClaimState
from store.upkeep import startup
from tests.bot.test_cli import gatehouse
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.llm_server import FakeLLM
from tests.pipelines.test_llm_drafter import MODEL, PRICE, budget, provider_settings, write_pipeline

ITEMS = 5


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


class Rig:
    def __init__(self, store: db.Store, pipeline: spec.Pipeline, drafter: drafters.Drafter,
                 client: httpx.AsyncClient) -> None:  # fmt: skip
        self.store = store
        self.pipeline = pipeline
        self.drafter = drafter
        self.engine = engine.Engine(
            store, {pipeline.name: pipeline}, client=client, drafter_for=lambda _: drafter
        )

    async def tick(self, now: datetime) -> engine.TickReport:
        return await self.engine.tick("news", "schedule", now)


@pytest.fixture
async def rig(
    store: db.Store, tmp_path: Path, feeds: FeedServer, llm: FakeLLM, client: httpx.AsyncClient,
    now: datetime,
) -> AsyncIterator[Rig]:  # fmt: skip
    pipeline = write_pipeline(tmp_path, feeds.url("/feed.xml"))
    await budget(store, now)
    async with providers.ProviderClient(provider_settings(llm)) as provider:
        yield Rig(store, pipeline, llm_drafter.LlmDrafter(store, pipeline, provider, PRICE), client)


async def claim_states(store: db.Store) -> list[str]:
    rows = await store.read(lambda c: c.execute("SELECT state FROM claims ORDER BY id").fetchall())
    return [row[0] for row in rows]


async def one_item_answered_but_never_shown(
    rig: Rig, feeds: FeedServer, now: datetime
) -> items.Item:
    """An item whose provider call was settled and kept, then dropped before its card
    (as the SLA found it stuck in drafting after a crash); the feed has nothing else."""
    feeds.set("/feed.xml", rss([]))
    item = await rig.store.write(
        items.create_sync, "news", "s0", "x1", {"title": "T", "text": "body"}, now
    )
    assert item is not None
    drafting = await rig.store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)
    await rig.drafter.draft(drafting, now)
    await sla.sweep(rig.store, now + timedelta(hours=1))
    dropped = await items.get(rig.store, item.id)
    assert dropped.state == State.BREACH
    return dropped


async def test_a_replay_shows_the_kept_output_without_a_new_call(
    rig: Rig, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    item = await one_item_answered_but_never_shown(rig, feeds, now)
    later = now + timedelta(hours=2)
    await operations.replay(rig.store, operations.Replay(item.id, "operator:7"), later)
    await rig.tick(later)
    again = await items.get(rig.store, item.id)
    assert (again.state, again.attempt, llm.calls) == (State.AWAITING_APPROVAL, 2, 1)
    draft = await drafts.get(rig.store, item.id, 1)
    kept = await llm_outputs.get(rig.store, draft.provenance["claim"])
    assert kept is not None and draft.text == kept.text and kept.request_id == "req_fake_000001"
    assert await claim_states(rig.store) == ["settled"]
    [card] = [c for c in await outbox.due(rig.store, later, ["card"]) if c.item_id == item.id]
    assert card.payload["text"] == kept.text and card.payload["attempt"] == 2


async def test_a_fresh_replay_pays_for_a_new_draft(
    rig: Rig, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    item = await one_item_answered_but_never_shown(rig, feeds, now)
    later = now + timedelta(hours=2)
    await operations.replay(rig.store, operations.Replay(item.id, "operator:7", fresh=True), later)
    trail = await events.for_entity(rig.store, "item", item.id)
    assert trail[-1].reason == "replayed by operator:7 with a fresh draft"
    await rig.tick(later)
    assert (await items.get(rig.store, item.id)).state == State.AWAITING_APPROVAL
    assert llm.calls == 2 and await claim_states(rig.store) == ["settled", "settled"]
    draft = await drafts.get(rig.store, item.id, 1)
    first = await llm_outputs.get(rig.store, draft.provenance["claim"] - 1)
    assert (
        first is not None and first.error is not None and "a fresh draft was asked" in first.error
    )


async def test_a_shown_output_is_never_shown_again_after_a_replay(
    rig: Rig, llm: FakeLLM, now: datetime
) -> None:
    await rig.tick(now)
    [item, *_] = await items.in_state(rig.store, State.AWAITING_APPROVAL, "news")
    await rig.store.write(items.transition_sync, item.id, State.REJECTED, "operator:7", now)
    await operations.replay(
        rig.store, operations.Replay(item.id, "operator:7"), now + timedelta(minutes=1)
    )
    await rig.tick(now + timedelta(minutes=1))
    assert llm.calls == ITEMS + 1  # the rejected text is not offered again


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("Launch \ud800 day", "a lone surrogate U+D800 at character 7"),  # SQLite's UTF-8
        ("Launch \x00 day", "a NUL character (U+0000) at character 7"),  # PostgreSQL's text
    ],
)
async def test_a_reply_the_store_cannot_hold_fails_that_item_alone(
    rig: Rig, llm: FakeLLM, now: datetime, reply: str, problem: str
) -> None:
    llm.queue_reply(reply)  # sent as the JSON escape "\ud800" or "\u0000"
    report = await rig.tick(now)
    assert (report.counts.drafted, report.counts.failed) == (ITEMS - 1, 1)
    run = await rig.store.read(runs.get_sync, report.run_id)
    assert run.status == "ok" and run.ended_at == now  # closed, not left running
    [failed] = await items.in_state(rig.store, State.FAILED, "news")
    last = (await events.for_entity(rig.store, "item", failed.id))[-1]
    assert last.reason == f"invalid_output: the reply holds text that cannot be stored: {problem}"
    assert len(await items.in_state(rig.store, State.AWAITING_APPROVAL, "news")) == ITEMS - 1
    assert await claim_states(rig.store) == ["settled"] * ITEMS  # the bad reply was paid for
    [held] = (await ledger.report(rig.store, now)).budgets
    assert held.held_micros == 0
    alerts = [bot_alerts.row_text(a) for a in await outbox.due(rig.store, now, ["alert"])]
    assert any(f"item {failed.id} " in text and "Launch \ufffd day" in text for text in alerts)


class Faulty(drafters.TemplateDrafter):
    """The template drafter with a bug that trips on one title."""

    async def draft(self, item: items.Item, now: datetime) -> drafters.DraftResult:
        if item.payload["title"] == "Story 2":
            raise KeyError("a bug")
        return await super().draft(item, now)


async def test_an_exception_in_one_item_fails_it_and_the_run_says_so(
    store: db.Store, tmp_path: Path, feeds: FeedServer, client: httpx.AsyncClient, now: datetime
) -> None:
    pipeline = write_pipeline(tmp_path, feeds.url("/feed.xml"))
    rig = Rig(store, pipeline, Faulty(pipeline), client)
    report = await rig.tick(now)
    [failed] = await items.in_state(store, State.FAILED, "news")
    assert failed.reason == "internal: KeyError: 'a bug'"
    assert len(await items.in_state(store, State.AWAITING_APPROVAL, "news")) == ITEMS - 1
    run = await store.read(runs.get_sync, report.run_id)
    assert (run.status, run.error_text) == (
        "error",
        f"item {failed.id}: internal: KeyError: 'a bug'",
    )


async def orphan_claim(rig: Rig, now: datetime, lease: timedelta) -> tuple[items.Item, int]:
    """An item left in drafting with the claim its draft began (as a crash leaves it)."""
    item = await rig.store.write(
        items.create_sync, "news", "s0", "x1", {"title": "T", "text": "b"}, now
    )
    assert item is not None
    item = await rig.store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)
    version = calls.prompt_version(rig.engine.pipelines["news"].draft.prompt_text or "")
    key = calls.claim_key("news", item.id, 1, version)
    request = {"model": MODEL, "max_tokens": 200, "prompt_version": version}
    work = await ledger.begin(
        rig.store, ledger.Call(key, calls.ENDPOINT, request, 50_000, "news", item.id, lease), now
    )
    return item, work.id


async def test_a_call_that_may_have_been_charged_waits_for_an_operator(
    rig: Rig, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([]))
    item, claim_id = await orphan_claim(rig, now, timedelta(minutes=5))
    await ledger.start_provider(rig.store, claim_id, now)  # then the process died
    for minute in (1, 2):
        report = await rig.tick(now + timedelta(minutes=minute))
        assert (report.counts.drafted, report.counts.failed, report.status) == (0, 0, "ok")
    assert (await items.get(rig.store, item.id)).state == State.DRAFTING
    assert llm.calls == 0 and await claim_states(rig.store) == ["uncertain"]
    await ledger.recover(rig.store, now + timedelta(minutes=2))  # the sweep's pass
    alerts = await outbox.due(rig.store, now + timedelta(hours=1), ["alert"])
    [told] = [bot_alerts.row_text(a) for a in alerts if a.payload.get("about")]
    assert told.startswith("💸 1 call was cut off") and "Not charged" in told
    assert f"item {item.id} waits in drafting until this claim is settled" in told


async def test_an_item_behind_a_settled_claim_goes_on_by_itself(
    rig: Rig, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    """Settled with no answer kept, the claim no longer holds its item back: the next
    tick drafts it under the next try's key, with no replay and the same attempt."""
    feeds.set("/feed.xml", rss([]))
    item, claim_id = await orphan_claim(rig, now, timedelta(minutes=5))
    await ledger.start_provider(rig.store, claim_id, now)  # then the process died
    await rig.tick(now + timedelta(minutes=1))
    assert await claim_states(rig.store) == ["uncertain"]

    later = now + timedelta(minutes=3)
    await operations.reconcile_claim(
        rig.store, claim_id, "0.001234", "invoice 7", "operator:7", later
    )
    assert (await timetable.all_states(rig.store))["news"].run_requested_at == later
    await rig.tick(later)
    drafted = await items.get(rig.store, item.id)
    assert (drafted.state, drafted.attempt) == (State.AWAITING_APPROVAL, 1)
    assert llm.calls == 1 and await claim_states(rig.store) == ["settled", "settled"]
    await rig.tick(later + timedelta(minutes=1))  # nothing more is paid for
    assert llm.calls == 1


async def test_an_item_the_sla_dropped_behind_an_uncertain_claim_comes_back_when_settled(
    rig: Rig, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    """Settled after the drafting SLA dropped the item (a night's wait): one Not charged
    for the episode brings it back as a new attempt, drafted at the next tick."""
    feeds.set("/feed.xml", rss([]))
    item, claim_id = await orphan_claim(rig, now, timedelta(minutes=5))
    await ledger.start_provider(rig.store, claim_id, now)  # then the process died
    await rig.tick(now + timedelta(minutes=1))
    night = now + timedelta(hours=8)
    await sla.sweep(rig.store, night)
    assert (await items.get(rig.store, item.id)).state == State.BREACH

    done = await operations.settle_uncertain(
        rig.store, "zero", "console: no such request", "operator:7", night
    )
    assert [s.claim.id for s in done.settled] == [claim_id] and done.replayed == (item.id,)
    await rig.tick(night)
    drafted = await items.get(rig.store, item.id)
    assert (drafted.state, drafted.attempt) == (State.AWAITING_APPROVAL, 2)
    assert llm.calls == 1


async def test_a_reserved_claim_past_its_lease_is_drafted_under_the_same_key(
    rig: Rig, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([]))
    item, claim_id = await orphan_claim(rig, now, timedelta(minutes=1))
    await rig.tick(now + timedelta(minutes=10))
    assert (await items.get(rig.store, item.id)).state == State.AWAITING_APPROVAL
    assert llm.calls == 1 and await claim_states(rig.store) == ["settled"]
    draft = await drafts.get(rig.store, item.id, 1)
    assert draft.provenance["claim"] == claim_id
    trail = [
        (e.from_state, e.to_state) for e in await events.for_entity(rig.store, "claim", claim_id)
    ]
    renewed, started, settled = (
        ("reserved", "reserved"),
        ("reserved", "started"),
        ("started", "settled"),
    )
    assert trail == [(None, "reserved"), renewed, started, settled]
    # Only a reserved claim's lease renews; anything else is refused and nothing changes.
    before = await ledger.get(rig.store, claim_id)
    with pytest.raises(errors.IllegalTransition, match="only a reserved lease renews"):
        await rig.store.write(
            lambda conn: claims.renew_sync(conn, claim_id, now, timedelta(hours=1))
        )
    assert await ledger.get(rig.store, claim_id) == before


async def test_a_released_claim_fails_the_item_with_what_to_do(
    rig: Rig, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([]))
    item, _ = await orphan_claim(rig, now, timedelta(minutes=1))
    later = now + timedelta(minutes=10)
    [released] = await ledger.recover(rig.store, later)
    assert released.state == ClaimState.RELEASED
    await rig.tick(later)
    failed = await items.get(rig.store, item.id)
    assert failed.state == State.FAILED and llm.calls == 0
    assert failed.reason is not None and "nothing was spent: replay the item" in failed.reason


async def test_text_sqlite_cannot_hold_is_cleaned_when_an_item_is_recorded(
    store: db.Store, now: datetime
) -> None:
    payload = {"title": "bad \ud800 title", "text": "fine", "extra": {"n": ["\udfff"]}}
    item = await store.write(items.create_sync, "news", "s0", "x1", payload, now)
    assert item is not None
    assert item.payload == {"title": "bad \ufffd title", "text": "fine", "extra": {"n": ["\ufffd"]}}
    assert json.loads(item.payload_json) == item.payload
    assert len(await events.for_entity(store, "item", item.id)) == 1


async def test_the_cli_and_the_replay_offer_ask_for_a_fresh_draft(
    rig: Rig, feeds: FeedServer, llm: FakeLLM, tmp_path: Path, now: datetime
) -> None:
    item = await one_item_answered_but_never_shown(rig, feeds, now)
    kept = await operations.kept_draft(item, rig.drafter)
    assert kept is not None
    offer = render.replay_offer(item, await events.for_entity(rig.store, "item", item.id), kept)
    assert f"a draft no card showed (budget claim {kept.claim_id})" in offer
    key = b"k" * 32
    data = callbacks.encode(key, callbacks.Button("fresh", item.id, item.attempt, item.version))
    assert callbacks.decode(key, data).action == "fresh"

    await rig.store.close()  # one writer: the CLI writes directly when no bot runs
    data_dir = rig.store.config.data_dir
    code, out, err = await gatehouse(data_dir, tmp_path, "replay", str(item.id), "--fresh")
    assert code == 0, err
    assert out.strip() == f"item {item.id} replayed: attempt 2, now new"
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        replayed = await items.get(store, item.id)
        async with providers.ProviderClient(provider_settings(llm)) as provider:
            drafter = llm_drafter.LlmDrafter(store, rig.pipeline, provider, PRICE)
            assert await operations.kept_draft(replayed, drafter) is None  # refused: fresh
        last = (await events.for_entity(store, "item", item.id))[-1]
        assert (last.actor, last.reason) == ("cli", "replayed by cli with a fresh draft")
    finally:
        await store.close()


async def test_startup_asks_for_a_run_of_each_pipeline_a_crash_left_work_in(
    store: db.Store, now: datetime
) -> None:
    for n, (pipeline, state) in enumerate(
        [("news", State.DRAFTING), ("mail", State.NEW), ("done", State.AWAITING_APPROVAL)]
    ):
        await timetable.ensure(store, pipeline, now + timedelta(days=1))
        item = await store.write(items.create_sync, pipeline, "s0", f"x{n}", {"title": "T"}, now)
        assert item is not None
        if state != State.NEW:
            item = await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)
        if state == State.AWAITING_APPROVAL:
            await store.write(items.transition_sync, item.id, state, "system", now)
    later = now + timedelta(minutes=1)
    await startup.recover(store, later)
    requested = {
        name: state.run_requested_at for name, state in (await timetable.all_states(store)).items()
    }
    assert requested == {"news": later, "mail": later, "done": None}


JSON_PIPELINE = """
name: news
schedule: 5m
sources:
  - type: http_json
    url: {url}
    scope: s0
approval:
  window: 2h
dispatch:
  type: none
"""


async def test_an_entry_with_text_the_store_cannot_hold_is_recorded_cleaned(
    store: db.Store, tmp_path: Path, feeds: FeedServer, client: httpx.AsyncClient, now: datetime
) -> None:
    entries = [
        {"id": "a\ud800", "title": "odd \udfff", "text": "t"},
        {"id": "b", "title": "ok"},
        {"id": "c\x00", "title": "nul"},  # PostgreSQL's text cannot hold NUL
    ]
    feeds.set_json("/items.json", entries)  # json.dumps sends "\ud800" and "\u0000" escapes
    (tmp_path / "news.yaml").write_text(JSON_PIPELINE.format(url=feeds.url("/items.json")))
    pipeline = spec.load_dir(tmp_path).pipelines["news"]
    report = await engine.Engine(store, {"news": pipeline}, client=client).tick(
        "news", "schedule", now
    )
    assert (report.status, report.counts.new, report.counts.drafted) == ("ok", 3, 3)
    found = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert sorted((i.source_id, i.payload["title"]) for i in found) == [
        ("a\ufffd", "odd \ufffd"), ("b", "ok"), ("c\ufffd", "nul")
    ]  # fmt: skip
