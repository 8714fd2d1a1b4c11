"""Open cards sent again, for chats that lost them: a new card row per awaiting item whose
card was sent, and the item's next decision edits the new copy as well."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from bot.chat import sent_messages
from pipelines.approval import card_trail, flow, rule
from pipelines.runs import engine
from store import db, items, outbox
from store.items.machine import State
from store.review.followups import Shown
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.pipelines.test_engine import write_pipeline


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set("/feed.xml", rss([("a", "One", "first"), ("b", "Two", "second")]))
        yield server


async def test_each_awaiting_items_sent_card_is_queued_again_once(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    await engine.Engine(store, {"news": pipeline}, client=client).tick("news", "schedule", now)
    sent, waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    [card] = await outbox.for_item(store, sent.id, "card")
    await outbox.mark_sent(store, card.id, '{"1001": [7]}', now)

    later = now + timedelta(minutes=1)
    assert await card_trail.resend_open(store, later) == [sent.id]
    # Once per sent card: asking again queues nothing more; a card not sent yet is not lost.
    assert await card_trail.resend_open(store, later) == []
    again, first = await outbox.for_item(store, sent.id, "card")
    assert (again.state, again.external_id, first.id) == ("pending", None, card.id)
    assert again.payload == first.payload | {"again_of": first.id}
    # With it, in the same unit, the edit that points the old copies to the new one.
    [pointer] = await outbox.for_item(store, sent.id, "card_edit")
    assert (pointer.state, pointer.payload["again_as"]) == ("pending", again.id)
    assert len(await outbox.for_item(store, waiting.id, "card")) == 1

    await flow.decide(store, pipeline, rule.Vote(Shown(sent.id, 1, 1), 1001, "approve"), later)
    edit, _ = await outbox.for_item(store, sent.id, "card_edit")
    # The sender edits the copies of the version an edit names: the new one too (and,
    # in a chat the new one reached, not the old one: bot.chat.edits).
    edited = await sent_messages.cards_for(store, sent.id, edit.payload)
    assert {card.id for card in edited} == {first.id, again.id}
