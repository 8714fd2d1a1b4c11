"""A pipeline's filter against a real SQLite store, the local feed server and the local
LLM: dropped entries end filtered with their rule, are never drafted nor charged, are
counted and listed, and /replay brings one back past the filter to a paid card."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from bot.chat import render
from bot.cli import output as cli_output
from pipelines import operations
from pipelines.config import spec
from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from pipelines.runs import engine
from store import db, items, ledger, outbox
from store.audit import events
from store.intake import runs
from store.items.machine import State
from store.ledger import prices as ledger_prices
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
filter:
  exclude:
    - words: [sponsored, giveaway]
    - regex: '(?i)\\bpodcast\\b'
      field: title
  include:
    - words: [tram, bus, metro]
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
    ("f1", "Sponsored: bus tickets", "Buy a bus pass."),
    ("f2", "Metro podcast, episode 3", "We talk about the metro."),
    ("k2", "Night BUS routes", "Routes change on Monday."),
    ("f3", "Weather today", "Sunny."),
    ("f4", "Tram GIVEAWAY", "Win a model tram."),
]
#: What each dropped entry's event says, by its guid.
RULES = {
    "f1": "filter exclude #1 (words [sponsored, giveaway]) matched 'Sponsored' in title",
    "f2": "filter exclude #2 (regex '(?i)\\bpodcast\\b' in title) matched 'podcast' in title",
    "f3": "filter include: no rule matched (words [tram, bus, metro])",
    "f4": "filter exclude #1 (words [sponsored, giveaway]) matched 'GIVEAWAY' in title",
}
PRICE = ledger_prices.Price(input_micros_per_mtok=1_000_000, output_micros_per_mtok=2_000_000)


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def _pipeline(directory: Path, url: str) -> spec.Pipeline:
    (directory / "prompt.txt").write_text("Write a post.\n{title}\n{text}\n")
    (directory / "city.yaml").write_text(PIPELINE.format(url=url))
    loaded = spec.load_dir(directory)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    return loaded.pipelines["city"]


async def _claimed_items(store: db.Store) -> list[int]:
    return await store.read(
        lambda conn: [row[0] for row in conn.execute("SELECT item_id FROM claims ORDER BY id")]
    )


async def test_filtered_entries_are_recorded_never_charged_and_replayed_past_the_filter(
    store: db.Store, tmp_path: Path, llm: FakeLLM, client: httpx.AsyncClient, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    settings = providers.ProviderSettings(
        kind=llm.kind, base_url=llm.base_url, api_key=SecretStr("k"), model="fake-1",
        timeout_s=5, max_retries=1, max_retry_wait_s=1,
    )  # fmt: skip
    with FeedServer() as feeds:
        feeds.set("/feed.xml", rss(ENTRIES))
        pipeline = _pipeline(tmp_path, feeds.url("/feed.xml"))
        async with providers.ProviderClient(settings) as provider:
            drafter = llm_drafter.LlmDrafter(store, pipeline, provider, PRICE)
            eng = engine.Engine(
                store, {"city": pipeline}, client=client, drafter_for=lambda _: drafter
            )
            report = await eng.tick("city", "schedule", now)

            assert report.counts == runs.Counts(fetched=6, new=6, drafted=2, filtered=4)
            [run] = await runs.recent_runs(store, "city")
            assert run.counts.filtered == 4
            by_guid = {
                item.source_id: item
                for state in (State.FILTERED, State.AWAITING_APPROVAL)
                for item in await items.in_state(store, state, "city")
            }
            assert {g for g, i in by_guid.items() if i.state == State.FILTERED} == set(RULES)
            for guid, rule in RULES.items():
                history = await events.for_entity(store, "item", by_guid[guid].id)
                assert [(e.to_state, e.actor, e.reason) for e in history] == [
                    ("new", "system", "fetched"),
                    ("filtered", "system", rule),
                ]
            # Only the kept entries reached the provider and the ledger.
            kept = sorted(by_guid[g].id for g in ("k1", "k2"))
            assert (llm.calls, sorted(await _claimed_items(store))) == (2, kept)

            listed = await operations.filtered(store, "city")
            assert {(i.source_id, i.reason) for i in listed} == set(RULES.items())
            status = await operations.pipeline_runs(store, "city", now + timedelta(minutes=1))
            assert "4 filtered today: /filtered city" in render.status_pipeline(status, now)
            shown = cli_output.filtered("city", listed, now)
            assert "matched 'Sponsored' in title" in shown and "Weather today" in shown

            # The operator overrules the filter: a new attempt, drafted and carded.
            weather = by_guid["f3"]
            later = now + timedelta(minutes=1)
            replayed = await operations.replay(
                store, operations.Replay(weather.id, "operator:42"), later
            )
            assert (replayed.state, replayed.attempt) == (State.NEW, 2)
            await eng.tick("city", "manual", later)

    back = await items.get(store, weather.id)
    assert back.state == State.AWAITING_APPROVAL
    trail = await events.for_entity(store, "item", weather.id)
    assert (trail[2].to_state, trail[2].actor, trail[2].reason) == (
        "new",
        "operator:42",
        "replayed by operator:42 past the filter",
    )
    cards = await outbox.for_item(store, weather.id, "card")
    assert [row.payload["attempt"] for row in cards] == [2]
    assert (llm.calls, (await _claimed_items(store))[-1]) == (3, weather.id)
    assert await operations.filtered_today(store, "city", later) == 3


def test_gatehouse_filtered_lists_each_entry_with_its_rule(tmp_path: Path, now: datetime) -> None:
    """The CLI as an operator runs it: a subprocess reading the store's file."""
    with FeedServer() as feeds:
        feeds.set("/feed.xml", rss(ENTRIES))
        _pipeline(tmp_path, feeds.url("/feed.xml"))

        async def record() -> None:
            async with httpx.AsyncClient() as client:
                store = await db.open(db.StoreConfig(data_dir=tmp_path / "data"))
                try:
                    pipeline = spec.load_dir(tmp_path).pipelines["city"]
                    # Recorded and filtered as a tick records them; nothing drafted.
                    eng = engine.Engine(store, {"city": pipeline}, client=client)
                    await eng.tick("city", "schedule", now)
                finally:
                    await store.close()

        asyncio.run(record())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {"GATEHOUSE_DATA_DIR": str(tmp_path / "data"), "GATEHOUSE_PIPELINES_DIR": str(tmp_path)}

    def gatehouse(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "bot.cli", *argv]
        return subprocess.run(
            command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )

    shown = gatehouse("filtered", "city")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["item", "filtered", "title", "rule"]
    assert len(lines) == 2 + len(RULES)
    for rule in RULES.values():
        assert sum(rule in line for line in lines) == 1
    assert lines[-1] == "bring one back past the filter with: gatehouse replay <item>"
    listed = json.loads(gatehouse("filtered", "city", "--json").stdout)
    assert {(row["source_id"], row["reason"]) for row in listed} == set(RULES.items())
    unknown = gatehouse("filtered", "cty")
    assert unknown.returncode == 2 and "Did you mean city?" in unknown.stderr
