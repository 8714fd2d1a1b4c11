"""A pipeline's triage against a real SQLite store, the local feed server and the local
LLM: each entry's triage is paid once through the ledger, an entry below the threshold
ends skipped with the model's score and reason in its event and is never drafted, a
replay brings it to a card past triage, and on_failure pass / hold decide what an entry
does when triage cannot run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from bot.chat import render
from pipelines import operations
from pipelines.approval import sla
from pipelines.config import spec, triage
from pipelines.drafting import calls, choice, drafters, steps
from pipelines.drafting import question as triage_drafter
from pipelines.providers import client as providers
from pipelines.runs import engine
from store import db, items, ledger, outbox
from store.audit import events
from store.intake import runs
from store.items.machine import State
from store.ledger import claims as ledger_claims
from store.ledger import prices as ledger_prices
from store.review.followups import Shown
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.llm_server import FakeLLM

PIPELINE = """
name: city
schedule: 5m
sources:
  - type: rss
    url: {url}
    scope: s0
triage:
  question: "Is this about public transport in the city?"
  threshold: 0.6
  max_tokens: 60
  on_failure: {on_failure}
draft:
  drafter: llm
  prompt: prompt.txt
  max_tokens: 100
approval:
  window: 2h
dispatch:
  type: none
"""

ENTRIES = [
    ("k1", "New tram line opens", "The city's tram reaches the harbour."),
    ("s1", "Weather today", "Sunny."),
    ("k2", "Night tram routes", "Routes change on Monday."),
    ("s2", "Football results", "The home side won."),
]
PRICE = ledger_prices.Price(input_micros_per_mtok=1_000_000, output_micros_per_mtok=2_000_000)


def answer(text: str) -> str | None:
    """The fake model's triage: trams score high, anything else low; drafts as usual."""
    if not text.startswith("Question:"):
        return None
    if "tram" in text.lower():
        return json.dumps({"score": 0.9, "reason": "about the city's trams"})
    return json.dumps({"score": 0.1, "reason": "not about\ntransport"})


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        server.answer = answer
        yield server


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set("/feed.xml", rss(ENTRIES))
        yield server


class Rig:
    def __init__(
        self, eng: engine.Engine, pipeline: spec.Pipeline, drafter: drafters.Drafter
    ) -> None:
        self.engine = eng
        self.pipeline = pipeline
        self.drafter = drafter

    async def tick(self, now: datetime) -> engine.TickReport:
        return await self.engine.tick("city", "schedule", now)


@pytest.fixture
async def rig_for(
    store: db.Store, tmp_path: Path, feeds: FeedServer, llm: FakeLLM, client: httpx.AsyncClient
) -> AsyncIterator[object]:
    settings = providers.ProviderSettings(
        kind=llm.kind, base_url=llm.base_url, api_key=SecretStr("k"), model="fake-1",
        timeout_s=5, max_retries=1, max_retry_wait_s=1,
    )  # fmt: skip
    chooser = choice.Drafters(settings, {"fake-1": PRICE})

    def build(on_failure: str = "pass") -> Rig:
        (tmp_path / "prompt.txt").write_text("Write a post.\n{title}\n{text}\n")
        text = PIPELINE.format(url=feeds.url("/feed.xml"), on_failure=on_failure)
        (tmp_path / "city.yaml").write_text(text)
        loaded = spec.load_dir(tmp_path)
        assert not loaded.errors, spec.format_errors(loaded.errors)
        pipeline = loaded.pipelines["city"]
        drafter = chooser(store, pipeline)
        eng = engine.Engine(store, {"city": pipeline}, client=client, drafter_for=lambda _: drafter)
        return Rig(eng, pipeline, drafter)

    yield build
    await chooser.aclose()


def _endpoint(item_id: int, idem: str) -> str:
    """Which call a claim paid for, told by its idempotency hash (a try of attempt 1 of a
    triage, or anything else: a draft)."""
    block = triage.TriageConfig(question="Is this about public transport in the city?")
    for attempt_try in range(3):
        version = triage_drafter.call_for(block, attempt_try).version
        key = calls.claim_key("city", item_id, 1, version)
        if ledger_claims.idem_hash(triage_drafter.ENDPOINT, key) == idem:
            return "llm.triage"
    return "llm.draft"


async def _claims(store: db.Store) -> list[tuple[int, str, str, int]]:
    """(item, endpoint, state, actual micros) of every claim, in order."""
    rows = await store.read(
        lambda conn: conn.execute(
            "SELECT item_id, idem_hash, state, actual_micros FROM claims ORDER BY id"
        ).fetchall()
    )
    return [(row[0], _endpoint(row[0], row[1]), row[2], row[3]) for row in rows]


async def _by_guid(store: db.Store) -> dict[str, items.Item]:
    found = {}
    for state in State:
        for item in await items.in_state(store, state, "city"):
            found[item.source_id] = item
    return found


async def test_entries_below_the_threshold_end_skipped_with_the_models_reason(
    store: db.Store, rig_for: object, llm: FakeLLM, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    rig = rig_for()  # type: ignore[operator]
    report = await rig.tick(now)

    assert report.counts == runs.Counts(fetched=4, new=4, drafted=2, skipped=2)
    [run] = await runs.recent_runs(store, "city")
    assert run.counts.skipped == 2
    by_guid = await _by_guid(store)
    states = {guid: item.state for guid, item in by_guid.items()}
    assert states == {
        "k1": State.AWAITING_APPROVAL,
        "k2": State.AWAITING_APPROVAL,
        "s1": State.SKIPPED,
        "s2": State.SKIPPED,
    }
    for guid in ("s1", "s2"):
        history = await events.for_entity(store, "item", by_guid[guid].id)
        assert [(e.to_state, e.actor, e.reason) for e in history][-1] == (
            "skipped",
            "system",
            "triage 0.10: not about transport",
        )
    # Every entry's triage paid once, settled once; only the kept entries drafted.
    claims = await _claims(store)
    triaged = sorted(c[0] for c in claims if c[1] == "llm.triage")
    drafted = sorted(c[0] for c in claims if c[1] == "llm.draft")
    assert triaged == sorted(item.id for item in by_guid.values())
    assert drafted == sorted(by_guid[g].id for g in ("k1", "k2"))
    assert {c[2] for c in claims} == {"settled"} and all(c[3] > 0 for c in claims)
    assert llm.calls == 6
    # The spend, triage included, shows in /budget under the pipeline.
    report_ = await ledger.report(store, now)
    [spend] = report_.pipelines
    assert (spend.pipeline, spend.claims) == ("city", 6)
    assert spend.spent_micros == sum(c[3] for c in claims)
    [card] = await outbox.for_item(store, by_guid["k1"].id, "card")
    assert card.payload["note"] == "🔎 triage 0.90: about the city's trams"

    # A second run asks nothing again: every triage was paid once.
    await rig.tick(now + timedelta(minutes=5))
    assert llm.calls == 6 and len(await _claims(store)) == 6

    # Skipped entries are listed, and a replay brings one to a card past triage.
    listed = await operations.skipped(store, "city")
    assert {(i.source_id, i.reason) for i in listed} == {
        ("s1", "triage 0.10: not about transport"),
        ("s2", "triage 0.10: not about transport"),
    }
    later = now + timedelta(minutes=10)
    weather = by_guid["s1"]
    await operations.replay(store, operations.Replay(weather.id, "operator:42"), later)
    await rig.tick(later)
    assert (await items.get(store, weather.id)).state == State.AWAITING_APPROVAL
    assert [c[1] for c in await _claims(store)][-1] == "llm.draft" and llm.calls == 7
    assert [row.payload["attempt"] for row in await outbox.for_item(store, weather.id, "card")] == [
        2
    ]


async def test_on_failure_pass_drafts_and_the_card_says_not_triaged(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss(ENTRIES[1:2]))  # a weather entry: it would be skipped
    llm.queue_fault("401")  # the provider refuses the triage: nothing charged
    rig = rig_for("pass")  # type: ignore[operator]
    await rig.tick(now)
    [item] = (await _by_guid(store)).values()
    assert item.state == State.AWAITING_APPROVAL
    [card] = await outbox.for_item(store, item.id, "card")
    assert card.payload["note"].startswith("⚠️ not triaged: ")
    assert [(c[1], c[2], c[3]) for c in await _claims(store)] == [
        ("llm.triage", "settled", 0),
        ("llm.draft", "settled", (await _claims(store))[1][3]),
    ]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ("", "⚠️ not triaged: the triage model's answer was empty"),
        (
            "x" * 100_036,
            "⚠️ not triaged: the triage model's answer has 100036 characters; at most 20000"
            " are allowed",
        ),
        ("{oops", "⚠️ not triaged: the triage model's answer is not valid JSON: "),
    ],
)
async def test_an_unusable_triage_answer_is_said_of_the_triage_not_of_a_draft(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime,
    answer: str, said: str,
) -> None:  # fmt: skip
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss(ENTRIES[1:2]))
    llm.queue_reply(answer)  # the triage's answer; the draft after it is the usual one
    rig = rig_for("pass")  # type: ignore[operator]
    await rig.tick(now)
    [item] = (await _by_guid(store)).values()
    [card] = await outbox.for_item(store, item.id, "card")
    assert card.payload["note"].startswith(said), card.payload["note"]
    assert "draft" not in card.payload["note"].split("\n")[0]


async def test_on_failure_hold_waits_and_triages_once_the_provider_answers(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss(ENTRIES[:1]))
    llm.queue_fault("401")
    rig = rig_for("hold")  # type: ignore[operator]
    await rig.tick(now)
    [item] = (await _by_guid(store)).values()
    assert item.state == State.DRAFTING and llm.calls == 1
    assert await outbox.for_item(store, item.id, "card") == []

    await rig.tick(now + timedelta(minutes=5))  # the provider answers now
    assert (await items.get(store, item.id)).state == State.AWAITING_APPROVAL
    claims = await _claims(store)
    assert [(c[1], c[2]) for c in claims] == [
        ("llm.triage", "settled"),
        ("llm.triage", "settled"),
        ("llm.draft", "settled"),
    ]
    assert claims[0][3] == 0 and llm.calls == 3


def test_a_triage_answer_must_be_a_score_within_0_and_1_and_a_reason() -> None:
    assert triage.read('{"score": 1, "reason": " a\\n b "}') == triage.Verdict(1.0, "a b")
    for bad in ('{"score": 1.5, "reason": "x"}', '{"score": 0.5}', "yes"):
        with pytest.raises(triage.InvalidVerdict):
            triage.read(bad)


def test_a_bad_triage_block_names_the_field(tmp_path: Path) -> None:
    (tmp_path / "prompt.txt").write_text("x {title}")
    bad = PIPELINE.format(url="http://127.0.0.1:1/f", on_failure="maybe")
    (tmp_path / "city.yaml").write_text(bad.replace("threshold: 0.6", "threshold: 2"))
    loaded = spec.load_dir(tmp_path)
    said = spec.format_errors(loaded.errors)
    assert "triage" in said and "threshold" in said and "on_failure" in said


async def test_a_triage_call_cut_off_by_a_crash_is_never_asked_again(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    """A claim left started (the process died during the call) may have been paid: the
    entry waits for reconcile-claim, with pass as with hold, and nothing is called."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss(ENTRIES[:1]))
    llm.queue_fault("401")  # the first run's triage: refused, nothing charged; held
    await rig_for("hold").tick(now)  # type: ignore[operator]
    [item] = (await _by_guid(store)).values()
    assert item.state == State.DRAFTING
    block = triage.TriageConfig(question="Is this about public transport in the city?")
    call = triage_drafter.call_for(block, 1)  # the next try, begun and started, then a kill
    key = calls.claim_key("city", item.id, 1, call.version)
    request = {"model": "fake-1", "max_tokens": 60, "prompt_version": call.version}
    asked = ledger.Call(
        key, triage_drafter.ENDPOINT, request, 1_000, "city", item.id, timedelta(minutes=5)
    )
    work = await ledger.begin(store, asked, now)
    await ledger.start_provider(store, work.id, now)
    calls_before = llm.calls

    # Restarted, now with on_failure: pass: still no second call, and no draft.
    await rig_for("pass").tick(now + timedelta(minutes=10))  # type: ignore[operator]
    assert (await items.get(store, item.id)).state == State.DRAFTING
    assert (await ledger.get(store, work.id)).state == "uncertain"
    assert llm.calls == calls_before


async def test_with_pass_a_triage_call_cut_off_and_reconciled_is_not_asked_again(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    """A crash cut off the triage call and the operator settled its claim with
    reconcile-claim: with pass the entry is drafted as not triaged, with no second
    triage call (the provider may have charged the first)."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss(ENTRIES[1:2]))  # a weather entry: it would be skipped
    llm.queue_fault("401")  # the first run's triage: refused, nothing charged; held
    await rig_for("hold").tick(now)  # type: ignore[operator]
    [item] = (await _by_guid(store)).values()
    block = triage.TriageConfig(question="Is this about public transport in the city?")
    call = triage_drafter.call_for(block, 1)  # the next try, begun and started, then a kill
    key = calls.claim_key("city", item.id, 1, call.version)
    request = {"model": "fake-1", "max_tokens": 60, "prompt_version": call.version}
    asked = ledger.Call(
        key, triage_drafter.ENDPOINT, request, 1_000, "city", item.id, timedelta(minutes=5)
    )
    work = await ledger.begin(store, asked, now)
    await ledger.start_provider(store, work.id, now)
    later = now + timedelta(minutes=10)
    await ledger.recover(store, later)
    await ledger.reconcile(store, work.id, ledger.Actual(700, "provider console"), "cli", later)
    calls_before = llm.calls

    await rig_for("pass").tick(later)  # type: ignore[operator]
    assert (await items.get(store, item.id)).state == State.AWAITING_APPROVAL
    [card] = await outbox.for_item(store, item.id, "card")
    assert card.payload["note"].startswith("⚠️ not triaged: ")
    assert llm.calls == calls_before + 1  # the draft's alone
    assert [c[1] for c in await _claims(store)] == ["llm.triage", "llm.triage", "llm.draft"]


async def test_a_triage_try_settled_while_its_run_reads_it_is_not_asked_again(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    """The question read its try as started, and the operator settled the try's claim
    with no answer before its paid call began (the crash bench's scripted operator did, a
    run of its own): that paid call asks nothing, as the question would not have either
    (under pass a triage is never asked a second time; its tries are the question's)."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss(ENTRIES[1:2]))
    llm.queue_fault("401")  # the first run's triage: refused, nothing charged; held
    await rig_for("hold").tick(now)  # type: ignore[operator]
    [item] = (await _by_guid(store)).values()
    block = triage.TriageConfig(question="Is this about public transport in the city?")
    call = triage_drafter.call_for(block, 1)  # the try the question read as started
    key = calls.claim_key("city", item.id, 1, call.version)
    request = {"model": "fake-1", "max_tokens": 60, "prompt_version": call.version}
    asked = ledger.Call(
        key, triage_drafter.ENDPOINT, request, 1_000, "city", item.id, timedelta(minutes=5)
    )
    work = await ledger.begin(store, asked, now)
    await ledger.start_provider(store, work.id, now)
    later = now + timedelta(minutes=10)
    await ledger.recover(store, later)
    await ledger.reconcile(store, work.id, ledger.Actual(700, "provider console"), "cli", later)
    rig = rig_for("pass")  # type: ignore[operator]
    plan = rig.drafter
    assert isinstance(plan, steps.Plan) and isinstance(plan.triage, steps.Triage)
    paid_call = plan.triage.question._asker(call)  # the try's own paid call, as ask makes it
    calls_before = llm.calls
    with pytest.raises(drafters.DraftFailed, match="settled without an output"):
        await paid_call.ask(await items.get(store, item.id), later)
    assert llm.calls == calls_before
    assert [c[1] for c in await _claims(store)] == ["llm.triage", "llm.triage"]


async def test_a_500_to_triage_under_hold_settles_at_zero_and_the_next_run_cards_it(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    """An HTTP error answer carries no usage and is not billed: its claim settles at zero
    with the answer as evidence, and the held entry is asked again at the next run,
    with no operator step (no reconcile-claim, no replay)."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss(ENTRIES[:1]))
    for _ in range(2):  # the call and its one retry (max_retries: 1)
        llm.queue_fault("500")
    rig = rig_for("hold")  # type: ignore[operator]
    await rig.tick(now)
    [item] = (await _by_guid(store)).values()
    assert item.state == State.DRAFTING and llm.calls == 2
    [(_, endpoint, state, actual)] = await _claims(store)
    assert (endpoint, state, actual) == ("llm.triage", "settled", 0)
    report = await ledger.report(store, now)
    assert report.uncertain == [] and report.budgets[0].held_micros == 0
    [claim] = await store.read(lambda conn: conn.execute("SELECT id FROM claims").fetchall())
    evidence = (await ledger.get(store, claim[0])).evidence
    assert evidence is not None and "HTTP 500 from 127.0.0.1: " in evidence

    await rig.tick(now + timedelta(minutes=5))  # the provider answers now
    assert (await items.get(store, item.id)).state == State.AWAITING_APPROVAL
    assert [(c[1], c[2]) for c in await _claims(store)] == [
        ("llm.triage", "settled"),
        ("llm.triage", "settled"),
        ("llm.draft", "settled"),
    ]
    assert llm.calls == 4
    assert (await ledger.report(store, now)).uncertain == []


async def test_replay_offers_no_draft_on_a_triaged_item_whose_draft_a_card_showed(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    """The item's triage answer is kept too, but it is no draft: a rejected item's offer
    promises nothing, and its replay pays for a new draft, as the offer says."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss(ENTRIES[:1]))  # about trams: triaged in, drafted, carded
    rig = rig_for()  # type: ignore[operator]
    await rig.tick(now)
    [item] = (await _by_guid(store)).values()
    assert item.state == State.AWAITING_APPROVAL and llm.calls == 2
    await operations.review.reject(
        store, rig.pipeline, Shown(item.id, item.attempt, item.version), 42, "off topic", now
    )
    rejected = await items.get(store, item.id)
    assert await operations.kept_draft(rejected, rig.drafter) is None
    trail = await events.for_entity(store, "item", item.id)
    assert "already wrote" not in render.replay_offer(rejected, trail, None)

    later = now + timedelta(minutes=5)
    await operations.replay(store, operations.Replay(item.id, "operator:42"), later)
    await rig.tick(later)
    assert (await items.get(store, item.id)).state == State.AWAITING_APPROVAL
    assert llm.calls == 3  # a new draft, paid


async def test_replay_offers_the_draft_no_card_showed_and_what_it_saves(
    store: db.Store, rig_for: object, llm: FakeLLM, feeds: FeedServer, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    feeds.set("/feed.xml", rss([]))
    rig = rig_for()  # type: ignore[operator]
    made = await store.write(
        items.create_sync, "city", "s0", "k9", {"title": "Tram news", "text": "trams"}, now
    )
    assert made is not None
    drafting = await store.write(items.transition_sync, made.id, State.DRAFTING, "system", now)
    await rig.drafter.draft(drafting, now)  # triaged, drafted, then a crash before the card
    await sla.sweep(store, now + timedelta(hours=1))
    dropped = await items.get(store, made.id)
    assert dropped.state == State.BREACH and llm.calls == 2
    triaged, drafted = await _claims(store)
    assert (triaged[1], drafted[1]) == ("llm.triage", "llm.draft")
    cost = drafted[3]

    kept = await operations.kept_draft(dropped, rig.drafter)
    assert kept is not None and kept.cost_micros == cost
    draft_claim = await store.read(
        lambda conn: conn.execute("SELECT max(id) FROM claims").fetchone()[0]
    )
    assert kept.claim_id == draft_claim
    offer = render.replay_offer(dropped, await events.for_entity(store, "item", made.id), kept)
    assert f"a draft no card showed (budget claim {draft_claim})" in offer
    assert "without a new call, which saves about $0.00" in offer

    later = now + timedelta(hours=2)
    await operations.replay(store, operations.Replay(made.id, "operator:42"), later)
    await rig.tick(later)
    assert (await items.get(store, made.id)).state == State.AWAITING_APPROVAL
    assert llm.calls == 2  # shown with no new call, as offered
