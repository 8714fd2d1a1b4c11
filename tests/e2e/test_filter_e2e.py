"""End to end: the real bot with a pipeline whose filter drops an entry: no card for it,
/status <pipeline> counts it, /replay names its rule and its button brings it to a card."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.botapi import localapi
from store import items
from store.audit import events
from store.items.machine import State
from tests.e2e.test_bot_e2e import (
    OPERATOR,
    TOKEN,
    BotProcess,
    cards,
    command,
    item_id_of,
    read,
    tap,
)
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer

PIPELINE = """\
name: news
schedule: 1h
sources:
  - type: rss
    url: {url}
    scope: e2e-news
filter:
  exclude:
    - words: [sponsored]
approval:
  undo_window: 0s
dispatch:
  type: none
"""
RULE = "filter exclude #1 (words [sponsored]) matched 'Sponsored' in title"


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


@pytest.fixture
def bot(tmp_path: Path, api: localapi.LocalBotApi) -> Iterator[BotProcess]:
    entries = [("g1", "Tram news", "one"), ("g2", "Sponsored tram", "two"), ("g3", "Bus", "3")]
    with FeedServer() as feed:
        feed.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        (tmp_path / "pipelines").mkdir()
        (tmp_path / "pipelines" / "news.yaml").write_text(
            PIPELINE.format(url=feed.url("/feed.xml"))
        )
        process = BotProcess(tmp_path, api).start()
        try:
            yield process
        finally:
            process.stop()


def _cards_of(api: localapi.LocalBotApi, count: int) -> list[Any]:
    """Approval cards (not the other messages with buttons), once there are `count`."""

    def enough() -> list[Any]:
        found = [card for card in cards(api) if _has(card, "Approve")]
        return found if len(found) >= count else []

    return api.wait_for(enough, timeout=60)  # a bound, not a speed: a loaded machine is slow


def _has(message: Any, label: str) -> bool:
    keys = message.reply_markup["inline_keyboard"]
    return any(label in key["text"] for row in keys for key in row)


async def test_a_filtered_entry_is_counted_and_replayed_to_a_card(
    bot: BotProcess, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shown = _cards_of(api, 2)
    assert not any("Sponsored" in card.text for card in shown)
    [dropped] = await read(data, lambda s: items.in_state(s, State.FILTERED, "news"))
    assert dropped.reason == RULE

    assert "1 filtered today: /filtered news" in command(api, "/status news")
    offer_text = command(api, f"/replay {dropped.id}")
    assert RULE in offer_text
    assert tap(api, OPERATOR, api.sent(OPERATOR)[-1], "Replay")["text"] == "replayed: attempt 2"
    third = _cards_of(api, 3)[-1]
    assert item_id_of(third) == dropped.id and "Sponsored tram" in third.text
    trail = await read(data, lambda s: events.for_entity(s, "item", dropped.id))
    assert (trail[2].actor, trail[2].reason) == (
        f"operator:{OPERATOR}",
        f"replayed by operator:{OPERATOR} past the filter",
    )
