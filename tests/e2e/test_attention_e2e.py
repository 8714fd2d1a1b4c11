"""End to end: a feed of 60 entries through the real bot process (`python -m bot`), the
local Bot API server and the fake LLM: a filter drops the sponsored ones, a priced triage
skips the minor ones, and the rest become cards, each count exactly as configured; each
dropped entry's event names its rule or the model's reason; replaying a filtered and a
skipped entry each gives a card."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.botapi import localapi
from store import items
from store.items.machine import State
from tests.e2e.test_bot_e2e import (
    OPERATOR,
    TOKEN,
    BotProcess,
    button,
    cards,
    command,
    item_id_of,
    read,
    tap,
)
from tests.e2e.test_nudges_e2e import set_budget
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM

PIPELINE = """\
name: news
schedule: 1h
sources:
  - type: rss
    url: {url}
    scope: e2e-attention
filter:
  exclude:
    - words: [sponsored]
triage:
  question: "Is this story worth a card?"
  threshold: 0.6
approval:
  undo_window: 0s
dispatch:
  type: none
"""
RULE = "filter exclude #1 (words [sponsored]) matched 'Sponsored' in title"
REASON = "triage 0.20: a minor story"
PRICES = json.dumps({"m": {"input_micros_per_mtok": 1, "output_micros_per_mtok": 1}})
#: Of 60 entries, every sixth is sponsored (filtered), two in six minor (skipped).
ENTRIES, FILTERED, SKIPPED = 60, 10, 20
CARDED = ENTRIES - FILTERED - SKIPPED


def title(n: int) -> str:
    kind = {0: "Sponsored", 1: "Minor", 2: "Minor"}.get(n % 6, "Major")
    return f"{kind} story {n:02d}"


def answer(text: str) -> str | None:
    """Triage: a minor story scores below the threshold, any other passes."""
    if not text.startswith("Question:"):
        return None
    if "Minor story" in text:
        return json.dumps({"score": 0.2, "reason": "a minor story"})
    return json.dumps({"score": 0.9, "reason": "a major story"})


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


@pytest.fixture
def model() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        fake.answer = answer
        yield fake


@pytest.fixture
async def bot(tmp_path: Path, api: localapi.LocalBotApi, model: FakeLLM) -> Any:
    entries = [(f"g{n}", title(n), f"Body {n}") for n in range(ENTRIES)]
    with FeedServer() as feed:
        feed.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        (tmp_path / "pipelines").mkdir()
        (tmp_path / "pipelines" / "news.yaml").write_text(
            PIPELINE.format(url=feed.url("/feed.xml"))
        )
        await set_budget(tmp_path / "data")
        process = BotProcess(tmp_path, api)
        process.env |= {
            "GATEHOUSE_LLM__KIND": "openai",
            "GATEHOUSE_LLM__BASE_URL": model.base_url,
            "GATEHOUSE_LLM__API_KEY": "k",
            "GATEHOUSE_LLM__MODEL": "m",
            "GATEHOUSE_PRICES": PRICES,
            "GATEHOUSE_TELEGRAM__RATE_LIMIT_PER_MINUTE": "0",
        }
        process.start()
        try:
            yield process
        finally:
            process.stop()


def approval_cards(api: localapi.LocalBotApi, count: int) -> list[Any]:
    """Approval cards (not the other messages with buttons), once there are `count`."""

    def enough() -> list[Any]:
        found = [card for card in cards(api) if _has(card, "Approve")]
        return found if len(found) >= count else []

    return api.wait_for(enough, timeout=120)  # a bound, not a speed: a loaded machine is slow


def _has(message: Any, label: str) -> bool:
    keys = message.reply_markup["inline_keyboard"]
    return any(label in key["text"] for row in keys for key in row)


async def in_state(data: Path, state: State, count: int) -> list[items.Item]:
    """The pipeline's items in `state`, once there are `count` of them."""
    for _ in range(600):  # a bound, not a speed
        found = await read(data, lambda s: items.in_state(s, state, "news"))
        if len(found) >= count:
            return list(found)
        await asyncio.sleep(0.2)
    raise AssertionError(f"{len(found)} items {state.value}, not {count}")


def titles(found: list[items.Item]) -> list[str]:
    return sorted(json.loads(item.payload_json)["title"] for item in found)


async def test_sixty_entries_filtered_skipped_and_carded_as_configured(
    bot: BotProcess, api: localapi.LocalBotApi, model: FakeLLM, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shown = approval_cards(api, CARDED)
    filtered = await in_state(data, State.FILTERED, FILTERED)
    skipped = await in_state(data, State.SKIPPED, SKIPPED)
    assert len(shown) == CARDED and all("Major story" in card.text for card in shown)
    assert titles(filtered) == sorted(title(n) for n in range(ENTRIES) if n % 6 == 0)
    assert {i.reason for i in filtered} == {RULE}
    assert titles(skipped) == sorted(title(n) for n in range(ENTRIES) if n % 6 in (1, 2))
    assert {i.reason for i in skipped} == {REASON}
    # Only the entries past the filter were asked about, each once.
    assert model.calls == ENTRIES - FILTERED

    # A filtered entry replayed past its filter comes to a card.
    dropped = filtered[0]
    assert RULE in command(api, f"/replay {dropped.id}")
    assert tap(api, OPERATOR, api.sent(OPERATOR)[-1], "Replay")["text"] == "replayed: attempt 2"
    back = approval_cards(api, CARDED + 1)[-1]
    assert item_id_of(back) == dropped.id and title(int(dropped.source_id[1:])) in back.text

    # A skipped entry brought back from /skipped comes to a card, not triaged again.
    api.inject_command(OPERATOR, OPERATOR, "/skipped news")
    listing = api.wait_for(
        lambda: [m for m in api.sent(OPERATOR) if "skipped, newest first" in m.text], timeout=10
    )[-1]
    api.inject_callback(OPERATOR, OPERATOR, listing.message_id, button(listing, "🔁 1"))
    again = approval_cards(api, CARDED + 2)[-1]
    assert item_id_of(again) in {i.id for i in skipped} and "Minor story" in again.text
    assert model.calls == ENTRIES - FILTERED
