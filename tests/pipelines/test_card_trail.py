"""The card's trail on a real store and a real webhook receiver: the edit after dispatch
names the destination, a permanent failure offers Retry, a retry keeps the attempt,
version and idempotency key, and only a dispatch failure can be retried; a fresh card
goes to one chat only, and only while the item waits."""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
import pytest

from pipelines import dispatch
from pipelines.approval import card_trail
from pipelines.config import spec
from pipelines.runs import engine
from pipelines.service import dispatcher
from store import db, errors, items, outbox, payloads
from store.audit import events
from store.items.machine import State
from store.review.followups import Shown
from tests.fakes.webhook_server import Reply, WebhookServer
from tests.pipelines import test_dispatcher

# The dispatcher tests' fixtures: a feed, a webhook receiver, a webhook pipeline.
feeds, hook, pipeline = test_dispatcher.feeds, test_dispatcher.hook, test_dispatcher.pipeline
approved_item = test_dispatcher.approved_item


async def edits(store: db.Store, item_id: int) -> list[dict[str, object]]:
    return [row.payload for row in reversed(await outbox.for_item(store, item_id, "card_edit"))]


async def test_a_failure_offers_retry_and_the_retry_keeps_the_key(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient,
    hook: WebhookServer, now: datetime,
) -> None:  # fmt: skip
    item = await approved_item(store, pipeline, client, now)
    hook.script(Reply(422, b"no"))
    await dispatcher.run_once(store, {"news": pipeline}, client, now)
    failed = (await edits(store, item.id))[-1]
    assert failed["buttons"] == payloads.RETRY_BUTTONS and failed["state"] == "failed"
    assert str(failed["status"]).startswith("✅ approved by operator:7")
    assert "⚠️ not sent: " in str(failed["status"]) and "422" in str(failed["status"])

    later = now + timedelta(minutes=1)
    retried = await card_trail.retry(store, pipeline, Shown(item.id, 1, 1), 8, later)
    assert (retried.state, retried.attempt, retried.version) == (State.APPROVED, 1, 1)
    trail = await events.for_entity(store, "item", item.id)
    assert (trail[-1].from_state, trail[-1].to_state, trail[-1].actor) == (
        State.FAILED, State.APPROVED, "operator:8",
    )  # fmt: skip
    await dispatcher.run_once(store, {"news": pipeline}, client, later)
    assert (await items.get(store, item.id)).state == State.DISPATCHED
    keys = [r.headers["idempotency-key"] for r in hook.requests]
    assert keys == [dispatch.idempotency_key("news", item.id, 1, 1)] * 2
    sent = (await edits(store, item.id))[-1]
    approved_line, sent_line = str(sent["status"]).split("\n")
    assert approved_line == str(failed["status"]).split("\n")[0]
    assert sent_line.startswith("📤 sent: webhook http://") and sent_line.endswith(" 200")
    # Dispatched: a second retry is refused and changes nothing.
    with pytest.raises(errors.Conflict, match="not failed at dispatch"):
        await card_trail.retry(store, pipeline, Shown(item.id, 1, 1), 8, later)


async def test_only_a_dispatch_failure_of_the_shown_version_is_retried(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient, now: datetime
) -> None:
    eng = engine.Engine(store, {"news": pipeline}, client=client)
    await eng.tick("news", "schedule", now)
    [item] = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    await store.write(
        items.transition_sync, item.id, State.FAILED, "system", now, reason="drafting: boom"
    )
    with pytest.raises(errors.Conflict, match="not failed at dispatch"):
        await card_trail.retry(store, pipeline, Shown(item.id, 1, 1), 7, now)
    with pytest.raises(errors.Conflict, match="is now at version 1"):
        await card_trail.retry(store, pipeline, Shown(item.id, 1, 2), 7, now)
    assert (await items.get(store, item.id)).state == State.FAILED


async def test_a_fresh_card_goes_to_one_chat_while_the_item_waits(
    store: db.Store, pipeline: spec.Pipeline, client: httpx.AsyncClient, now: datetime
) -> None:
    eng = engine.Engine(store, {"news": pipeline}, client=client)
    await eng.tick("news", "schedule", now)
    [item] = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert await card_trail.show_again(store, item.id, 1001, now) is not None
    cards = await outbox.for_item(store, item.id, "card")
    assert [c.target for c in cards] == ["chat:1001", outbox.OPERATORS]
    # The same card, draft text joined, marked as a copy of the first.
    assert cards[0].payload == cards[1].payload | {"again_of": cards[1].id}
    [pointer] = await outbox.for_item(store, item.id, "card_edit")
    assert (pointer.target, pointer.payload["again_as"]) == ("chat:1001", cards[0].id)
    await store.write(items.transition_sync, item.id, State.EXPIRED, "sweep", now)
    with pytest.raises(errors.Conflict, match="nothing waits"):
        await card_trail.show_again(store, item.id, 1001, now)


def test_the_sent_line_says_where_and_the_receivers_id() -> None:
    line = card_trail.sent_line
    assert line("webhook h:1 answered 200", "abc") == "📤 sent: webhook h:1 answered 200 · id abc"
    assert (
        line("wrote /out/news-1-v1.md", "/out/news-1-v1.md") == "📤 sent: wrote /out/news-1-v1.md"
    )
    assert line("sent to ana@example.org via smtp:25", "<gh-1@x>") == (
        "📤 sent to ana@example.org via smtp:25 · id <gh-1@x>"
    )
    assert line("no dispatch target") == "🏁 done: this pipeline sends nothing"
