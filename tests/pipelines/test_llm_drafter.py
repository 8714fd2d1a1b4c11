"""The LLM drafter through the budget ledger: real SQLite, a fake provider and feed on sockets."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from bot.chat import alerts as bot_alerts
from pipelines import operations
from pipelines.approval import flow, rule, sla
from pipelines.config import draft as draft_block
from pipelines.config import spec
from pipelines.drafting import choice, drafters, steps
from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from pipelines.providers import settings as provider_settings_mod
from pipelines.runs import engine
from pipelines.text import validation
from store import db, drafts, items, ledger, outbox
from store.audit import events
from store.items.machine import State
from store.ledger import outputs as llm_outputs
from store.ledger import prices as ledger_prices
from store.ledger.machine import ClaimState
from store.review import followups
from store.review.followups import Shown
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.llm_server import FakeLLM

#: 1 micro per input token, 2 per output token: costs are easy to check by hand.
PRICE = ledger_prices.Price(input_micros_per_mtok=1_000_000, output_micros_per_mtok=2_000_000)
MODEL = "fake-1"
SCHEMA = '{"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}'
#: Claims whose worst case is held in the budget.
HOLDING = (ClaimState.RESERVED, ClaimState.STARTED)

PIPELINE = """
name: {name}
schedule: 5m
sources:
  - type: rss
    url: {url}
    scope: s0
draft:
  drafter: llm
  prompt: prompt.txt
  max_tokens: 200
{schema}
approval:
  window: 2h
dispatch:
  type: none
"""


def write_pipeline(
    directory: Path, url: str, *, name: str = "news", schema: str | None = None
) -> spec.Pipeline:
    (directory / "prompt.txt").write_text("Write a post for {pipeline}.\n{title}\n{text}\n")
    block = f"  output_schema: {schema}" if schema else ""
    (directory / f"{name}.yaml").write_text(PIPELINE.format(name=name, url=url, schema=block))
    loaded = spec.load_dir(directory)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    return loaded.pipelines[name]


def provider_settings(llm: FakeLLM, **overrides: Any) -> providers.ProviderSettings:
    values: dict[str, Any] = {
        "kind": llm.kind,
        "base_url": llm.base_url,
        "api_key": SecretStr("test-key"),
        "model": MODEL,
        "timeout_s": 5,
        "max_retries": 2,
        "max_retry_wait_s": 5,
    }
    return providers.ProviderSettings(**(values | overrides))


async def claim_rows(store: db.Store) -> list[tuple[int, str]]:
    return await store.read(
        lambda conn: conn.execute("SELECT id, state FROM claims ORDER BY id").fetchall()
    )


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set("/feed.xml", rss([("a1", "Launch", "The product launches on Monday.")]))
        yield server


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


class Rig:
    """One pipeline, its engine, and the provider client the LlmDrafter uses."""

    def __init__(
        self,
        store: db.Store,
        pipeline: spec.Pipeline,
        provider: providers.ProviderClient,
        client: httpx.AsyncClient,
    ) -> None:
        self.store = store
        self.pipeline = pipeline
        self.drafter = llm_drafter.LlmDrafter(store, pipeline, provider, PRICE)
        self.engine = engine.Engine(
            store, {pipeline.name: pipeline}, client=client, drafter_for=lambda _: self.drafter
        )

    async def tick(self, now: datetime) -> items.Item:
        await self.engine.tick(self.pipeline.name, "schedule", now)
        found = await self.store.read(
            lambda conn: (
                items.in_state_sync(conn, State.FAILED, None, 10)
                + items.in_state_sync(conn, State.AWAITING_APPROVAL, None, 10)
            )
        )
        assert len(found) == 1
        return found[0]


@pytest.fixture
async def rig_for(
    store: db.Store, tmp_path: Path, feeds: FeedServer, llm: FakeLLM, client: httpx.AsyncClient
) -> AsyncIterator[Any]:
    opened: list[providers.ProviderClient] = []

    def build(schema: str | None = None, **overrides: Any) -> Rig:
        pipeline = write_pipeline(tmp_path, feeds.url("/feed.xml"), schema=schema)
        provider = providers.ProviderClient(provider_settings(llm, **overrides))
        opened.append(provider)
        return Rig(store, pipeline, provider, client)

    yield build
    for provider in opened:
        await provider.aclose()


async def budget(store: db.Store, now: datetime, limit: int = 10_000_000) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", limit), "cli", now)


async def test_a_draft_is_paid_once_and_settled_at_its_cost(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for()
    await budget(store, now)
    item = await rig.tick(now)
    assert item.state == State.AWAITING_APPROVAL and llm.calls == 1
    draft = await drafts.get(store, item.id, 1)
    assert draft.text.startswith("DRAFT: ")
    claim = await ledger.get(store, draft.provenance["claim"])
    assert claim.state == ClaimState.SETTLED and claim.usage is not None
    assert claim.actual_micros == claim.usage.input_tokens + 2 * claim.usage.output_tokens
    assert draft.cost_micros == claim.actual_micros
    assert claim.evidence == "request req_fake_000001"
    [row] = (await ledger.report(store, now)).budgets
    assert (row.spent_micros, row.held_micros) == (claim.actual_micros, 0)
    # The prompt fences the fetched text, and the key is in a header, not the URL.
    sent = llm.requests[0]
    assert "UNTRUSTED CONTENT" in sent.body["messages"][-1]["content"]
    assert sent.headers["authorization"] == "Bearer test-key"

    # A retry of the same attempt (say, after a crash before the card was queued)
    # reuses the kept output: no second call, no second charge.
    again = await rig.drafter.draft(await items.get(store, item.id), now + timedelta(minutes=1))
    assert (again.text, again.cost_micros, llm.calls) == (draft.text, claim.actual_micros, 1)
    assert await claim_rows(store) == [(claim.id, "settled")]


async def test_a_timeout_after_start_leaves_the_claim_uncertain(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for(timeout_s=0.3)
    await budget(store, now)
    llm.queue_fault("timeout", hold_s=5)
    item = await rig.tick(now)
    assert item.state == State.FAILED and item.reason is not None
    assert item.reason.startswith("provider: ") and "no reply" in item.reason
    [(claim_id, state)] = await claim_rows(store)
    assert state == ClaimState.UNCERTAIN
    claim = await ledger.get(store, claim_id)
    report = await ledger.report(store, now)
    assert report.budgets[0].held_micros == claim.reserved_micros > 0  # never released
    assert [u.claim_id for u in report.uncertain] == [claim_id]
    # The same attempt again must not call (and maybe pay) a second time.
    with pytest.raises(drafters.DraftFailed, match="could pay twice") as failed:
        await rig.drafter.draft(item, now + timedelta(minutes=1))
    assert failed.value.reason == "provider" and llm.calls == 1


async def test_a_failed_provider_call_logs_the_item_once_with_its_pipeline_and_reason(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    rig = rig_for()
    await budget(store, now)
    llm.queue_fault("drop")  # the connection closes halfway through the reply
    caplog.set_level(logging.WARNING)
    item = await rig.tick(now)
    assert item.state == State.FAILED and item.reason is not None
    told = [r for r in caplog.records if f"item {item.id} " in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in told] == [
        (logging.WARNING, f"item {item.id} (news) failed: {item.reason}")
    ]


async def test_an_over_size_reply_fails_the_item_and_settles_its_claim_as_paid(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for(max_reply_bytes=64 * 1024)
    await budget(store, now)
    llm.queue_reply("x" * 200_000)
    item = await rig.tick(now)
    assert item.state == State.FAILED and item.reason is not None
    assert item.reason.startswith("invalid_output: the provider's reply was larger than")
    assert "GATEHOUSE_LLM__MAX_REPLY_BYTES (65536 bytes)" in item.reason
    [(claim_id, state)] = await claim_rows(store)
    claim = await ledger.get(store, claim_id)
    assert state == ClaimState.SETTLED and claim.actual_micros == claim.reserved_micros > 0
    kept = await llm_outputs.get(store, claim_id)
    assert kept is not None and kept.text == "" and kept.error is not None
    assert llm.calls == 1


async def test_an_unusable_reply_is_kept_up_to_max_kept_chars(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for(max_kept_chars=25_000)
    await budget(store, now)
    llm.queue_reply("y" * 60_000)  # read whole, but longer than any draft
    item = await rig.tick(now)
    assert item.state == State.FAILED and item.reason is not None
    assert item.reason.startswith("invalid_output: the draft has 60000 characters")
    [(claim_id, state)] = await claim_rows(store)
    kept = await llm_outputs.get(store, claim_id)
    assert state == ClaimState.SETTLED and kept is not None and kept.text == "y" * 25_000


def test_max_kept_chars_keeps_at_least_a_whole_draft() -> None:
    assert provider_settings_mod.MIN_KEPT_CHARS == validation.MAX_DRAFT_CHARS
    with pytest.raises(ValueError, match="max_kept_chars"):
        providers.ProviderSettings(
            kind="openai", api_key=SecretStr("k"), model=MODEL, max_kept_chars=100
        )


async def test_a_429_then_success_is_one_settled_claim(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for()
    await budget(store, now)
    llm.queue_fault("429", retry_after=0)
    item = await rig.tick(now)
    assert item.state == State.AWAITING_APPROVAL and llm.calls == 2
    [(claim_id, state)] = await claim_rows(store)
    assert state == ClaimState.SETTLED
    claim = await ledger.get(store, claim_id)
    assert claim.evidence == "request req_fake_000002"
    [row] = (await ledger.report(store, now)).budgets
    assert (row.spent_micros, row.held_micros) == (claim.actual_micros, 0)


async def test_a_refused_call_releases_the_hold(
    store: db.Store, tmp_path: Path, feeds: FeedServer, client: httpx.AsyncClient, now: datetime
) -> None:
    with FakeLLM(api_key="the-right-key") as llm:
        pipeline = write_pipeline(tmp_path, feeds.url("/feed.xml"))
        async with providers.ProviderClient(provider_settings(llm)) as provider:
            rig = Rig(store, pipeline, provider, client)
            await budget(store, now)
            item = await rig.tick(now)
    assert item.state == State.FAILED and item.reason is not None
    assert "HTTP 401" in item.reason and "test-key" not in item.reason
    [(claim_id, state)] = await claim_rows(store)
    claim = await ledger.get(store, claim_id)
    assert (state, claim.actual_micros) == (ClaimState.SETTLED, 0)
    [row] = (await ledger.report(store, now)).budgets
    assert (row.spent_micros, row.held_micros) == (0, 0)


@pytest.mark.parametrize(
    ("fault", "reply", "schema", "claim_state", "message"),
    [
        ("malformed", None, None, ClaimState.UNCERTAIN, "body is unusable: not JSON"),
        (None, "Here you go: {title: oops", SCHEMA, ClaimState.SETTLED, "not valid JSON"),
        (None, '{"title": 5}', SCHEMA, ClaimState.SETTLED, "at title: 5 is not of type"),
        (None, '{"headline": "x"}', SCHEMA, ClaimState.SETTLED, "'title' is a required"),
    ],
)
async def test_bad_output_fails_the_item_with_the_reason_in_its_history(
    store: db.Store,
    rig_for: Any,
    llm: FakeLLM,
    now: datetime,
    fault: str | None,
    reply: str | None,
    schema: str | None,
    claim_state: ClaimState,
    message: str,
) -> None:
    rig = rig_for(schema=schema)
    await budget(store, now)
    if fault:
        llm.queue_fault(fault)
    else:
        assert reply is not None
        llm.queue_reply(reply)
    item = await rig.tick(now)
    assert item.state == State.FAILED
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert last.to_state == State.FAILED
    assert last.reason is not None and last.reason.startswith("invalid_output: ")
    assert message in last.reason
    # The call was paid for (or may have been): the claim is not released.
    [(claim_id, state)] = await claim_rows(store)
    assert state == claim_state
    kept = await llm_outputs.get(store, claim_id)
    assert kept is not None and kept.error is not None and message in kept.error
    raw = kept.text
    assert raw == (reply if reply else "<html>upstream hiccup: this is not JSON {")
    alerts = await outbox.due(store, now, ["alert"])
    [alert] = [a for a in alerts if "raw output" in bot_alerts.row_text(a)]
    assert f"raw output: {raw}" in bot_alerts.row_text(alert)
    # An uncertain hold is announced once, with how to settle it, by claim recovery.
    await ledger.recover(store, now)
    alerts = await outbox.due(store, now, ["alert"])
    uncertain = [a for a in alerts if "call was cut off" in bot_alerts.row_text(a)]
    assert len(uncertain) == (1 if claim_state == "uncertain" else 0)
    if schema:  # json mode was asked for, and the schema is in the system prompt
        body = llm.requests[0].body
        assert body["response_format"] == {"type": "json_object"}
        assert '"required": ["title"]' in body["messages"][0]["content"]


async def test_valid_json_output_goes_to_approval(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for(schema=SCHEMA)
    await budget(store, now)
    llm.queue_reply('{"title": "Launch on Monday"}')
    item = await rig.tick(now)
    assert item.state == State.AWAITING_APPROVAL
    assert json.loads((await drafts.get(store, item.id, 1)).text) == {"title": "Launch on Monday"}


async def test_missing_usage_keeps_the_draft_and_the_claim_uncertain(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for()
    await budget(store, now)
    llm.queue_fault("missing_usage")
    item = await rig.tick(now)
    assert item.state == State.AWAITING_APPROVAL
    [(claim_id, state)] = await claim_rows(store)
    assert state == ClaimState.UNCERTAIN
    [card] = await outbox.due(store, now, ["card"])
    assert card.payload["cost_micros"] is None
    assert f"budget claim {claim_id}" in card.payload["note"]


async def test_without_a_budget_the_template_drafter_is_used(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for()
    item = await rig.tick(now)
    assert item.state == State.AWAITING_APPROVAL and llm.calls == 0
    [card] = await outbox.due(store, now, ["card"])
    assert card.payload["note"] == "no budget configured: template drafter used"
    assert card.payload["drafter"] == "template"


async def test_budget_exceeded_fails_the_item_and_alerts(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for()
    await budget(store, now, limit=100)
    item = await rig.tick(now)
    assert item.state == State.FAILED and llm.calls == 0
    assert item.reason is not None and item.reason.startswith("budget: budget exceeded")
    [alert] = await outbox.due(store, now, ["alert"])
    assert "budget" in bot_alerts.row_text(alert) and str(item.id) in bot_alerts.row_text(alert)
    assert await claim_rows(store) == []  # nothing held, nothing left behind


async def test_a_replay_is_a_new_attempt_with_a_new_claim(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for()
    await budget(store, now)
    item = await rig.tick(now)
    await flow.decide(store, rig.pipeline, rule.Vote(Shown(item.id, 1, 1), 7, "reject"), now)
    await store.write(items.replay_sync, item.id, events.operator(7), now, "try again")
    await rig.engine.tick("news", "replay", now + timedelta(minutes=1))
    again = await items.get(store, item.id)
    assert (again.state, again.attempt, llm.calls) == (State.AWAITING_APPROVAL, 2, 2)
    assert [state for _, state in await claim_rows(store)] == ["settled", "settled"]


async def test_a_first_draft_looks_for_a_kept_output_only_once_begin_finds_its_claim(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first attempt's key is new unless a crash left its claim, which begin finds (and
    writes nothing then): only then is a kept output looked for, one read per item saved.
    A replay (attempt 2) looks first, since an earlier attempt's output may stand in."""
    rig = rig_for()
    await budget(store, now)
    looked: list[int] = []
    reusable = llm_outputs.reusable_sync

    def counted(conn: Any, endpoint: str, keys: Any, *rest: Any) -> Any:
        keys = list(keys)  # the keys come lazily, each attempt's latest try
        looked.append(len(keys))
        return reusable(conn, endpoint, keys, *rest)

    monkeypatch.setattr(llm_outputs, "reusable_sync", counted)
    item = await rig.tick(now)
    assert (looked, llm.calls) == ([], 1)
    # The same attempt again (a crash before its card was queued) finds its claim first.
    again = await rig.drafter.draft(await items.get(store, item.id), now)
    assert (looked, llm.calls, again.cost_micros is not None) == ([1], 1, True)
    await flow.decide(store, rig.pipeline, rule.Vote(Shown(item.id, 1, 1), 7, "reject"), now)
    await store.write(items.replay_sync, item.id, events.operator(7), now, "try again")
    await rig.drafter.draft(await items.get(store, item.id), now)
    assert looked[1] == 2  # attempts 2 and 1 looked at before any begin


async def test_only_a_replayed_attempt_looks_for_a_redraft_note(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    """Notes are kept for the attempt a redraft opens (2 on), so a first draft reads none:
    one read per item saved. A note planted for attempt 1 shows that it is not read."""
    rig = rig_for()
    await budget(store, now)
    item = await rig.tick(now)
    await store.write(followups.keep_note_sync, item.id, 1, "never read", "cli", now)
    again = await rig.drafter.draft(item, now)  # the output kept: no second call
    assert again.note is None and llm.calls == 1
    await flow.decide(store, rig.pipeline, rule.Vote(Shown(item.id, 1, 1), 7, "reject"), now)
    await store.write(items.replay_sync, item.id, events.operator(7), now, "try again")
    await store.write(followups.keep_note_sync, item.id, 2, "name the city", "cli", now)
    await rig.engine.tick("news", "replay", now + timedelta(minutes=1))
    cards = await outbox.due(store, now + timedelta(hours=1), ["card"])
    assert any("name the city" in json.dumps(c.payload, ensure_ascii=False) for c in cards)


async def test_drafters_picks_each_pipelines_drafter_and_says_why(
    store: db.Store, tmp_path: Path, feeds: FeedServer, llm: FakeLLM, now: datetime
) -> None:
    pipeline = write_pipeline(tmp_path, feeds.url("/feed.xml"))
    plain = pipeline.model_copy(
        update={"draft": draft_block.DraftConfig(drafter="template")}, deep=True
    )
    item = await store.write(
        items.create_sync, "news", "s0", "x", {"title": "T", "text": "body"}, now
    )
    assert item is not None
    unpriced = choice.Drafters(provider_settings(llm), {})
    result = await unpriced(store, pipeline).draft(item, now)
    assert result.note == "no price for model 'fake-1' in GATEHOUSE_PRICES: template drafter used"
    unset = choice.Drafters(None, {MODEL: PRICE})
    assert "no LLM provider configured" in (
        (await unset(store, pipeline).draft(item, now)).note or ""
    )
    assert isinstance(steps.plan_of(unset(store, plain)).drafter, drafters.TemplateDrafter)

    wired = choice.Drafters(provider_settings(llm), {MODEL: PRICE})
    try:
        await budget(store, now)
        result = await wired(store, pipeline).draft(item, now)
    finally:
        await wired.aclose()
    assert result.provenance["drafter"] == "llm" and llm.calls == 1


async def test_drafts_past_the_clients_turns_wait_before_anything_is_held(
    store: db.Store, tmp_path: Path, feeds: FeedServer, client: httpx.AsyncClient, now: datetime
) -> None:
    """Twelve new items, three turns: no more than three calls in flight, and no more
    than three claims holding budget at any moment (the others' leases have not begun)."""
    entries = [(f"e{n}", f"Story {n}", f"Body {n}.") for n in range(12)]
    feeds.set("/feed.xml", rss(entries))
    in_flight, most_in_flight, most_held = 0, 0, 0
    lock = threading.Lock()

    def observe(event: str, _request: Any) -> None:
        nonlocal in_flight, most_in_flight
        with lock:
            in_flight += 1 if event == "request" else -1
            most_in_flight = max(most_in_flight, in_flight)

    with FakeLLM(delay_s=0.1) as llm:
        llm.observe = observe
        async with providers.ProviderClient(
            provider_settings(llm, max_concurrent_calls=3)
        ) as provider:
            rig = Rig(store, write_pipeline(tmp_path, feeds.url("/feed.xml")), provider, client)
            await budget(store, now)
            ticking = asyncio.ensure_future(rig.engine.tick("news", "schedule", now))
            while not ticking.done():
                held = [row for row in await claim_rows(store) if row[1] in HOLDING]
                most_held = max(most_held, len(held))
                await asyncio.sleep(0.01)
            await ticking
    assert llm.calls == 12
    assert most_in_flight == 3 and 1 <= most_held <= 3
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news", limit=20)
    assert len(waiting) == 12


async def test_a_draft_answered_500_settles_at_zero_and_the_next_run_drafts_it(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    """An HTTP error answer is not billed: the claim settles at zero with the answer as
    its evidence, the item waits in drafting, and the next run asks again (a new key)."""
    rig = rig_for(max_retries=1)
    await budget(store, now)
    for _ in range(2):  # the call and its one retry
        llm.queue_fault("500")
    await rig.engine.tick("news", "schedule", now)
    [item] = await items.in_state(store, State.DRAFTING, "news")
    [(claim_id, state)] = await claim_rows(store)
    claim = await ledger.get(store, claim_id)
    assert (state, claim.actual_micros, llm.calls) == (ClaimState.SETTLED, 0, 2)
    assert (
        claim.evidence is not None and "HTTP 500 from 127.0.0.1: fake error 500" in claim.evidence
    )
    report = await ledger.report(store, now)
    assert (report.uncertain, report.budgets[0].held_micros) == ([], 0)

    item = await rig.tick(now + timedelta(minutes=5))
    assert item.state == State.AWAITING_APPROVAL and llm.calls == 3
    assert [state for _, state in await claim_rows(store)] == ["settled", "settled"]
    draft = await drafts.get(store, item.id, 1)
    assert draft.provenance["claim"] != claim_id


async def test_a_500_from_a_provider_that_bills_errors_leaves_the_claim_uncertain(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for(max_retries=0, bills_errors=True)
    await budget(store, now)
    llm.queue_fault("500")
    item = await rig.tick(now)
    assert item.state == State.FAILED and item.reason is not None
    assert item.reason.startswith("provider: ") and "HTTP 500" in item.reason
    assert [state for _, state in await claim_rows(store)] == [ClaimState.UNCERTAIN]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        # Python refuses to read an integer of more than 4,300 digits: a plain ValueError.
        ('{"title": ' + "7" * 5000 + "}", "not usable JSON: Exceeds the limit (4300 digits)"),
        ('{"title": ' + "[" * 5000 + "]" * 5000 + "}", "not usable JSON: it is nested too deeply"),
    ],
)
async def test_every_reply_that_fails_to_parse_is_invalid_output_with_its_claim_settled(
    store: db.Store,
    rig_for: Any,
    llm: FakeLLM,
    now: datetime,
    caplog: pytest.LogCaptureFixture,
    reply: str,
    message: str,
) -> None:
    rig = rig_for(schema=SCHEMA)
    await budget(store, now)
    llm.queue_reply(reply)
    item = await rig.tick(now)
    assert item.state == State.FAILED and item.reason is not None
    assert item.reason.startswith(f"invalid_output: the output is {message}")
    [(claim_id, state)] = await claim_rows(store)
    claim = await ledger.get(store, claim_id)
    assert state == ClaimState.SETTLED and claim.actual_micros is not None
    assert claim.actual_micros > 0  # a paid reply, settled at its cost
    kept = await llm_outputs.get(store, claim_id)
    assert kept is not None and kept.text == reply and kept.error is not None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback


async def test_a_draft_a_later_try_wrote_is_offered_and_shown_by_a_replay(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    """Try 0 was answered 500; try 1 was answered, then the item breached before its
    card: the replay offer finds try 1's draft, and the replay shows it with no call."""
    rig = rig_for(max_retries=0)
    await budget(store, now)
    llm.queue_fault("500")
    await rig.engine.tick("news", "schedule", now)
    [waiting] = await items.in_state(store, State.DRAFTING, "news")
    later = now + timedelta(minutes=5)
    await rig.drafter.draft(waiting, later)  # try 1 answers; a crash before the card
    await sla.sweep(store, later + timedelta(hours=1))
    dropped = await items.get(store, waiting.id)
    assert dropped.state == State.BREACH and llm.calls == 2
    [(_, _), (answered, _)] = await claim_rows(store)

    kept = await operations.kept_draft(dropped, rig.drafter)
    assert kept is not None and kept.claim_id == answered
    assert kept.cost_micros == (await ledger.get(store, answered)).actual_micros
    await operations.replay(
        store, operations.Replay(waiting.id, "operator:42"), later + timedelta(hours=2)
    )
    item = await rig.tick(later + timedelta(hours=2))
    assert item.state == State.AWAITING_APPROVAL and llm.calls == 2
    assert (await drafts.get(store, item.id, 1)).provenance["claim"] == answered


async def test_an_error_answers_evidence_is_bounded_and_holds_no_secret(
    store: db.Store, rig_for: Any, llm: FakeLLM, now: datetime
) -> None:
    rig = rig_for(max_retries=0)
    await budget(store, now)
    said = "upstream failed for Authorization: Bearer sk-live-0123456789abcdef; " + "x" * 5000
    llm.queue_fault("503", message=said)
    await rig.engine.tick("news", "schedule", now)
    [(claim_id, state)] = await claim_rows(store)
    evidence = (await ledger.get(store, claim_id)).evidence
    assert state == ClaimState.SETTLED and evidence is not None
    assert (
        "HTTP 503 from 127.0.0.1: upstream failed for Authorization: Bearer <redacted>" in evidence
    )
    assert "sk-live" not in evidence and len(evidence) < 500
