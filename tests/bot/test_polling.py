"""Only the leader talks to Telegram: its long polls end before its trust does, a
sender on a worker that does not lead sends nothing (the leader's will), and an
update read again (by a new leader, or delivered twice) is acted on once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from telegram import Bot, Update
from telegram.ext import ApplicationBuilder, TypeHandler

from bot.chat import auth, kit, polling, sender
from bot.demo.botapi import localapi
from bot.web import metrics
from pipelines.service import leader, workers
from store import db, items, outbox

TOKEN = "555222:polling-test-token_abcdefghijklmnopqrs"
SOURCE_IDS = itertools.count(1)


@pytest.mark.parametrize(
    ("trust_left_s", "timeout"),
    [(0.0, None), (1.9, None), (2.0, 1), (4.5, 3), (11.0, 10), (60.0, polling.POLL_TIMEOUT_S)],
)
def test_a_long_poll_ends_a_second_before_the_trust_does(
    trust_left_s: float, timeout: int | None
) -> None:
    assert polling.poll_timeout(trust_left_s) == timeout


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


async def test_a_worker_that_does_not_lead_sends_no_card(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    item = await store.write(
        items.create_sync, "news", "s", f"g{next(SOURCE_IDS)}", {"title": "T"}, now
    )
    assert item is not None
    payload = {"pipeline": "news", "title": "T", "link": None, "text": "draft"}
    row_id = await outbox.enqueue(
        store, "card", outbox.OPERATORS, {**payload, "attempt": 1, "version": 1}, now,
        item_id=item.id,
    )  # fmt: skip
    leading = False

    follower = sender.Sender(
        store, bot, lambda row: [11], lambda row: None, clock=lambda: now,
        may_send=lambda: leading,
    )  # fmt: skip
    assert await follower.send_due(now) == 0
    assert (await store.read(outbox.get_sync, row_id)).state == "pending" and api.sent(11) == []
    leading = True
    assert await follower.send_due(now) == 1
    assert (await store.read(outbox.get_sync, row_id)).state == "sent" and len(api.sent(11)) == 1


async def test_an_update_read_again_is_acted_on_once(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    application = ApplicationBuilder().bot(bot).updater(None).build()
    acted: list[int] = []

    async def act(update: Update, context: Any) -> None:
        acted.append(update.update_id)

    application.add_handler(TypeHandler(Update, polling.once), group=-2)
    application.add_handler(TypeHandler(Update, act))
    outbox_sender = sender.Sender(store, bot, lambda row: [], lambda row: None)
    gate = auth.Gate([1001], 0)
    application.bot_data["deps"] = kit.Deps(
        store, {}, None, gate, b"key", outbox_sender, lambda: now
    )
    message = {
        "message_id": 1,
        "date": 0,
        "chat": {"id": 1001, "type": "private"},
        "from": {"id": 1001, "is_bot": False, "first_name": "O"},
        "text": "/status",
    }
    update = Update.de_json({"update_id": 41, "message": message}, bot)
    async with application:
        await application.process_update(update)
        # A new leader reads the updates its predecessor had not confirmed.
        await application.process_update(update)
    assert acted == [41]


async def test_stopping_ends_a_long_poll_at_once(bot: Bot) -> None:
    """Shutdown or a lost lease must not wait out a long poll: the poll is cancelled,
    and what it would have read stays unconfirmed for the next poller."""
    stop = asyncio.Event()
    fetch = polling._unless_stopped(bot.get_updates(timeout=50), stop)
    task = asyncio.ensure_future(fetch)
    await asyncio.sleep(0.3)  # the request is with the server, which holds it
    assert not task.done()
    stop.set()
    # Bounded only so a regression fails instead of hanging: the poll asked for 50 s.
    assert await asyncio.wait_for(task, 20) is None


async def test_a_failed_long_poll_is_counted_and_polled_again(
    store: db.Store, api: localapi.LocalBotApi
) -> None:
    """getUpdates passes no rate limiter, so the poller counts its failures itself."""
    registry = workers.Registry(store, lambda: datetime.now(UTC))
    leadership = leader.Leadership(
        store, "w1", timedelta(seconds=30), lambda: datetime.now(UTC), registry
    )
    assert await leadership.step()
    sample = ("gatehouse_telegram_errors_total", {"kind": "network"})
    before = metrics.REGISTRY.get_sample_value(*sample) or 0.0
    api.fail_next("getUpdates", status=502)
    application = ApplicationBuilder().token(TOKEN).base_url(api.base_url).build()
    stop = asyncio.Event()
    async with application:
        polling_task = asyncio.create_task(
            polling.poll(application, leadership, [Update.MESSAGE], stop)
        )
        api.inject_command(77, 77, "/status")  # read by the poll after the failed one
        update = await asyncio.wait_for(application.update_queue.get(), 20)
        stop.set()
        await asyncio.wait_for(polling_task, 20)
    await leadership.stand_down()
    assert update.message is not None and update.message.text == "/status"
    assert metrics.REGISTRY.get_sample_value(*sample) == before + 1


async def test_an_update_that_cannot_be_read_is_skipped_and_the_rest_handled(
    store: db.Store, api: localapi.LocalBotApi
) -> None:
    """A field this python-telegram-bot version requires and Telegram did not send fails
    the whole getUpdates answer; polling reads the updates one by one instead, skips the
    unreadable one (confirming it) and hands on the others."""
    registry = workers.Registry(store, lambda: datetime.now(UTC))
    leadership = leader.Leadership(
        store, "w1", timedelta(seconds=30), lambda: datetime.now(UTC), registry
    )
    assert await leadership.step()
    user = {"id": 5, "is_bot": True, "first_name": "bot"}
    broken = {"status": "restricted", "user": user, "is_member": True, "until_date": 0}
    chat = {"id": -40, "type": "group", "title": "G"}
    before = {"status": "member", "user": user}
    change = {"chat": chat, "from": user, "date": 0, "old_chat_member": before}
    change["new_chat_member"] = broken
    skipped = api.state.push_update({"my_chat_member": change})["update_id"]
    api.inject_command(77, 77, "/status")
    application = ApplicationBuilder().token(TOKEN).base_url(api.base_url).build()
    stop = asyncio.Event()
    async with application:
        allowed = [Update.MESSAGE, Update.MY_CHAT_MEMBER]
        polling_task = asyncio.create_task(polling.poll(application, leadership, allowed, stop))
        update = await asyncio.wait_for(application.update_queue.get(), 20)
        api.inject_command(77, 77, "/help")  # the next poll goes on past the skipped one
        following = await asyncio.wait_for(application.update_queue.get(), 20)
        stop.set()
        await asyncio.wait_for(polling_task, 20)
    await leadership.stand_down()
    assert update.message is not None and update.message.text == "/status"
    assert following.message is not None and following.message.text == "/help"
    assert api.state.pending_update_count() == 0 and update.update_id > skipped


async def test_a_tap_sent_while_the_lease_changes_hands_is_read_by_the_next_leader(
    store: db.Store, api: localapi.LocalBotApi
) -> None:
    """The leader's poll ends with its lease (its long poll is cancelled, not answered);
    a tap sent before another worker leads waits at Telegram, unconfirmed, and the next
    leader's first poll reads it: no tap is lost in a handover."""

    def clock() -> datetime:
        return datetime.now(UTC)

    registry = workers.Registry(store, clock)
    first = leader.Leadership(store, "w1", timedelta(seconds=30), clock, registry)
    assert await first.step()
    old = ApplicationBuilder().token(TOKEN).base_url(api.base_url).build()
    new = ApplicationBuilder().token(TOKEN).base_url(api.base_url).build()
    stop_old, stop_new = asyncio.Event(), asyncio.Event()
    async with old, new:
        old_poll = asyncio.create_task(polling.poll(old, first, [Update.MESSAGE], stop_old))
        api.inject_command(77, 77, "/status")
        read_before = await asyncio.wait_for(old.update_queue.get(), 20)
        await asyncio.sleep(0.3)  # the old leader's next long poll is with the server
        await first.stand_down()
        stop_old.set()  # as the runtime stops a duty when its worker stops leading
        await asyncio.wait_for(old_poll, 20)
        api.inject_command(77, 77, "/help")  # the tap, while no worker leads
        second = leader.Leadership(store, "w2", timedelta(seconds=30), clock, registry)
        assert await second.step()
        new_poll = asyncio.create_task(polling.poll(new, second, [Update.MESSAGE], stop_new))
        read_after = await asyncio.wait_for(new.update_queue.get(), 20)
        stop_new.set()
        await asyncio.wait_for(new_poll, 20)
        await second.stand_down()
        assert old.update_queue.empty()
    assert read_before.message is not None and read_before.message.text == "/status"
    assert read_after.message is not None and read_after.message.text == "/help"
    assert read_after.update_id > read_before.update_id
