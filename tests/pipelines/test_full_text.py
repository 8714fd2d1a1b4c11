"""Full text end to end: a local site's feed and article pages, the real engine, the LLM
drafter against the fake provider (which records the prompts), a real SQLite store."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from pipelines.config import spec
from pipelines.drafting import choice
from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from pipelines.runs import engine, trial
from store import db, drafts, items, outbox
from store.items.machine import State
from tests.fakes import site
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM
from tests.pipelines.test_llm_drafter import MODEL, PRICE, budget, provider_settings

PIPELINE = """
name: news
schedule: 5m
sources:
  - type: rss
    url: {url}
    scope: s0
    full_text: true
    allow_private_addresses: {private}
    timeout_seconds: 1
    max_bytes: 20000
draft:
  drafter: llm
  prompt: prompt.txt
  max_tokens: 200
approval:
  window: 2h
dispatch:
  type: none
"""
ARTICLE = (
    "The council voted 7 to 2 on Tuesday to rebuild the old bridge by 2027, after a year"
    " of hearings in which residents of both banks asked for a wider footpath.",
    "Work starts in spring; the ferry runs meanwhile, every twenty minutes, and is free"
    " for anyone who crossed the bridge on foot before it closed.",
)
GOOD = site.Story("good", "Bridge vote", "Council votes on the bridge.", ARTICLE)
SLOW = site.Story("slow", "Slow story", "A teaser for the slow page.")
HUGE = site.Story("huge", "Huge story", "A teaser for the huge page.")
EMPTY = site.Story("empty", "Empty story", "A teaser for the empty page.")


def write_pipeline(directory: Path, url: str, *, private: bool = True) -> spec.Pipeline:
    (directory / "prompt.txt").write_text("{title}\nARTICLE:\n{text}\nTEASER:\n{summary}\n")
    text = PIPELINE.format(url=url, private="true" if private else "false")
    (directory / "news.yaml").write_text(text)
    loaded = spec.load_dir(directory)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    return loaded.pipelines["news"]


@pytest.fixture
def news() -> Iterator[FeedServer]:
    with FeedServer() as server:
        site.serve(server, [GOOD, SLOW, HUGE, EMPTY])
        server.set(site.page_path("slow"), "", "text/html", hang=True)
        huge = "<html><body><article>" + "<p>word</p>" * 5000 + "</article></body></html>"
        server.set(site.page_path("huge"), huge, "text/html")
        yield server


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        for _ in range(4):
            server.queue_reply("A post.")
        yield server


async def draft_all(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient, llm: FakeLLM,
    now: datetime,
) -> dict[str, items.Item]:  # fmt: skip
    await budget(store, now)
    async with providers.ProviderClient(provider_settings(llm)) as provider:
        drafter = llm_drafter.LlmDrafter(store, pipeline, provider, PRICE)
        rig = engine.Engine(store, {"news": pipeline}, client=client, drafter_for=lambda _: drafter)
        await rig.tick("news", "manual", now)
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    return {item.source_id: item for item in waiting}


def prompt_for(llm: FakeLLM, title: str) -> str:
    prompts = [str(r.body["messages"][-1]["content"]) for r in llm.requests]
    [found] = [p for p in prompts if title in p.split("ARTICLE:")[0]]
    return found


async def test_drafts_read_the_article_and_cards_say_why_when_they_could_not(
    store: db.Store, news: FeedServer, client: httpx.AsyncClient, llm: FakeLLM,
    tmp_path: Path, now: datetime,
) -> None:  # fmt: skip
    pipeline = write_pipeline(tmp_path, news.url("/feed.xml"))
    drafted = await draft_all(store, pipeline, client, llm, now)
    assert sorted(drafted) == ["empty", "good", "huge", "slow"]

    good = prompt_for(llm, "Bridge vote")
    article, teaser = good.split("TEASER:")
    assert ARTICLE[0] in article and ARTICLE[1] in article and "Sport" not in article
    assert "Council votes on the bridge." in teaser and ARTICLE[0] not in teaser
    draft = await drafts.get(store, drafted["good"].id, 1)
    assert draft.image_url == news.url(site.image_path("good"))
    [request] = news.requests_to(site.page_path("good"))
    assert request.headers["User-Agent"] == "gatehouse (pipeline news)"

    cards = {row.item_id: row.payload for row in await outbox.due(store, now, ["card"])}
    assert cards[drafted["good"].id]["note"] is None
    assert cards[drafted["good"].id]["image_url"] == news.url(site.image_path("good"))
    why = {
        "slow": "timed out after 1 s",
        "huge": "larger than max_bytes (20000 bytes)",
        "empty": "no article found on the page",
    }
    for guid, reason in why.items():
        note = cards[drafted[guid].id]["note"]
        assert note.startswith("📄 full text not used (") and reason in note, note
        assert note.endswith("drafted from the feed's teaser") and "\n" not in note
        title = {"slow": SLOW, "huge": HUGE, "empty": EMPTY}[guid]
        assert title.teaser in prompt_for(llm, title.title).split("TEASER:")[0]


async def test_a_link_to_a_private_address_is_not_fetched_unless_allowed(
    store: db.Store, news: FeedServer, client: httpx.AsyncClient, llm: FakeLLM,
    tmp_path: Path, now: datetime,
) -> None:  # fmt: skip
    pipeline = write_pipeline(tmp_path, news.url("/feed.xml"), private=False)
    drafted = await draft_all(store, pipeline, client, llm, now)
    assert not news.requests_to(site.page_path("good"))
    card = next(
        r for r in await outbox.due(store, now, ["card"]) if r.item_id == drafted["good"].id
    )
    assert "resolves to a private address (127.0.0.1)" in card.payload["note"]
    assert drafted["good"].payload.get("image_url") is None


async def test_an_item_seen_before_is_not_fetched_again(
    store: db.Store, news: FeedServer, client: httpx.AsyncClient, llm: FakeLLM,
    tmp_path: Path, now: datetime,
) -> None:  # fmt: skip
    news.set("/feed.xml", site.feed(news, [GOOD]), "application/rss+xml")
    pipeline = write_pipeline(tmp_path, news.url("/feed.xml"))
    await draft_all(store, pipeline, client, llm, now)
    await draft_all(store, pipeline, client, llm, now)
    assert len(news.requests_to(site.page_path("good"))) == 1


async def test_a_dry_run_shows_each_articles_length_or_why_the_teaser_was_used(
    news: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    pipeline = write_pipeline(tmp_path, news.url("/feed.xml"))
    report = await trial.run(pipeline, client, now)
    notes = {payload["title"]: payload["note"] for _, payload in report.cards}
    length = len(" ".join(ARTICLE))
    assert re.search(r"📄 full text: [\d,]+ characters", notes["Bridge vote"])
    found = int(re.findall(r"([\d,]+) characters", notes["Bridge vote"])[0].replace(",", ""))
    assert length <= found < length + 100  # the article, with its headline; no menu
    assert "📄 full text not used (no article found on the page)" in notes["Empty story"]
    assert "full text not used (the page timed out after 1 s)" in notes["Slow story"]


async def test_a_filtered_entry_is_neither_fetched_nor_drafted(
    store: db.Store, news: FeedServer, client: httpx.AsyncClient, llm: FakeLLM,
    tmp_path: Path, now: datetime,
) -> None:  # fmt: skip
    news.set("/feed.xml", site.feed(news, [GOOD, EMPTY]), "application/rss+xml")
    write_pipeline(tmp_path, news.url("/feed.xml"))
    filtered = (tmp_path / "news.yaml").read_text() + "filter:\n  exclude:\n    - words: [bridge]\n"
    (tmp_path / "news.yaml").write_text(filtered)
    loaded = spec.load_dir(tmp_path)
    assert not loaded.errors, spec.format_errors(loaded.errors)

    drafted = await draft_all(store, loaded.pipelines["news"], client, llm, now)

    assert sorted(drafted) == ["empty"]
    assert [i.source_id for i in await items.in_state(store, State.FILTERED, "news")] == ["good"]
    assert not news.requests_to(site.page_path("good"))
    assert len(news.requests_to(site.page_path("empty"))) == 1
    assert len(llm.requests) == 1


async def test_an_entry_triage_skips_is_never_fetched(
    store: db.Store, news: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    """Triage runs before the article is fetched: a skipped entry costs its triage call
    and nothing more, no page request to its site."""
    news.set("/feed.xml", site.feed(news, [GOOD, EMPTY]), "application/rss+xml")
    write_pipeline(tmp_path, news.url("/feed.xml"))
    triaged = (tmp_path / "news.yaml").read_text() + (
        "triage:\n  question: Is this about the bridge?\n  threshold: 0.6\n  max_tokens: 60\n"
    )
    (tmp_path / "news.yaml").write_text(triaged)
    loaded = spec.load_dir(tmp_path)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    pipeline = loaded.pipelines["news"]

    def answer(text: str) -> str | None:
        if not text.startswith("Question:"):
            return "A post."
        score = 0.1 if "Bridge vote" in text else 0.9
        return json.dumps({"score": score, "reason": "scored by title"})

    with FakeLLM() as model:
        model.answer = answer
        await budget(store, now)
        chooser = choice.Drafters(provider_settings(model), {MODEL: PRICE})
        try:
            drafter = chooser(store, pipeline)
            rig = engine.Engine(
                store, {"news": pipeline}, client=client, drafter_for=lambda _: drafter
            )
            await rig.tick("news", "manual", now)
        finally:
            await chooser.aclose()

    [skipped] = await items.in_state(store, State.SKIPPED, "news")
    assert skipped.source_id == "good"
    assert not news.requests_to(site.page_path("good"))
    assert len(news.requests_to(site.page_path("empty"))) == 1
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert [item.source_id for item in waiting] == ["empty"]
