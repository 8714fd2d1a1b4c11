"""End to end: the real bot (in this process) with the template drafter: a draft whose text
has tells gets a card with the tells line and keeps its tells with its version; a draft
without any gets no line; /history says the newest version's tells; an operator's edit
is linted as it is stored: a version 2 with another tell has that tell's line."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import drafts, items
from store.audit import events
from store.items.machine import State
from tests.e2e import test_bot_e2e as e2e
from tests.e2e.test_nudges_e2e import OPERATOR, card_texts, running, tap, told, with_label
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer

TELLING = "We delve into the budget. In today's fast-paced world, buses matter."
LINE = "✍️ 2 tells: delve · 'in today's world'"


@pytest.fixture
def feed() -> Iterator[FeedServer]:
    with FeedServer() as server:
        entries = [("g1", "Budget night", TELLING), ("g2", "Bridge shut", "The bridge shuts.")]
        server.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        yield server


async def test_a_draft_with_tells_shows_them_and_an_edit_without_them_does_not(
    tmp_path: Path, feed: FeedServer
) -> None:
    async with running(tmp_path, feed, "") as bot:
        api, store = bot.api, bot.runtime.store
        cards = await api.await_for(
            lambda: card_texts(api, OPERATOR)[1:] and card_texts(api, OPERATOR), timeout=60
        )
        telling = next(c for c in cards if "Budget night" in c.text)
        plain = next(c for c in cards if "Bridge shut" in c.text)
        assert LINE in html.unescape(telling.text)
        assert "✍️" not in plain.text
        item_id = e2e.item_id_of(telling)
        kept = await drafts.get(store, item_id, 1)
        assert kept.tells is not None and kept.tells["line"] == LINE
        api.inject_command(OPERATOR, OPERATOR, f"/history {item_id}")
        told_history = await api.await_for(lambda: told(api, "(news): "), timeout=10)
        assert f"version 1: {LINE}" in html.unescape(told_history[-1].text)

        await tap(api, telling, "Edit")
        prompt = (await api.await_for(lambda: told(api, "tap the draft"), timeout=10))[-1]
        edited = "Budget night: a bustling bus station."
        api.inject_message(OPERATOR, OPERATOR, edited, prompt.message_id)
        new = await api.await_for(
            lambda: [c for c in card_texts(api, OPERATOR) if "version 2" in c.text], timeout=30
        )
        assert "✍️ 1 tell: bustling" in new[0].text and "delve" not in new[0].text
        kept = await drafts.get(store, item_id, 2)
        assert kept.tells is not None and kept.tells["line"] == "✍️ 1 tell: bustling"


async def test_a_block_tell_makes_approve_ask_and_approve_anyway_is_audited(
    tmp_path: Path, feed: FeedServer
) -> None:
    (tmp_path / "pipelines" / "voice").mkdir(parents=True)
    (tmp_path / "pipelines" / "voice" / "strict.yaml").write_text(
        "tune:\n  delve: {severity: block}\n"
    )
    async with running(tmp_path, feed, "", draft="voice:\n  profile: voice/strict.yaml") as bot:
        api, store = bot.api, bot.runtime.store
        cards = await api.await_for(
            lambda: card_texts(api, OPERATOR)[1:] and card_texts(api, OPERATOR), timeout=60
        )
        telling = next(c for c in cards if "Budget night" in c.text)
        plain = next(c for c in cards if "Bridge shut" in c.text)
        item_id = e2e.item_id_of(telling)

        asked = await tap(api, telling, "Approve")
        assert asked["show_alert"] and "has a block tell" in asked["text"]
        assert "Approve anyway" in asked["text"]
        swapped = await api.await_for(lambda: with_label(api, telling, "Approve anyway"), 10)
        assert (await items.get(store, item_id)).state == State.AWAITING_APPROVAL

        assert (await tap(api, plain, "Approve"))["text"].startswith("✅")  # no block: one tap
        said = await tap(api, swapped, "Approve anyway")
        assert said["text"].startswith("✅"), said
        assert (await items.get(store, item_id)).state != State.AWAITING_APPROVAL
        trail = await events.for_entity(store, "item", item_id)
        [override] = [e for e in trail if (e.reason or "").startswith("approve anyway")]
        assert override.actor == events.operator(OPERATOR)
        assert "delve" in (override.reason or "")
