"""End to end, the real bot process against the local Bot API server: bad numbers from
chat and buttons get a reply and change nothing, an Edit prompt outlives a restart, a
stranger's text never reaches the log, and titles show as the feed meant them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.botapi import localapi
from bot.ground import callbacks
from pipelines import operations
from store import items
from store.items.machine import State
from store.reports import info
from store.review import prompts
from tests.e2e import test_bot_e2e as e2e
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer

AT_T = "AT&T cuts prices <again>"
ZERO_WIDTH = "Zero\u200bwidth story"


@pytest.fixture
def feed() -> Iterator[FeedServer]:
    with FeedServer() as server:
        entries = [("t1", AT_T, "Prices fall."), ("t2", ZERO_WIDTH, "Invisible\u200b no more.")]
        server.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        yield server


@pytest.fixture
def bot(tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer) -> Iterator[e2e.BotProcess]:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "news.yaml").write_text(
        e2e.PIPELINE.format(url=feed.url("/feed.xml"), out=tmp_path / "out")
    )
    process = e2e.BotProcess(tmp_path, api).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=e2e.TOKEN) as server:
        yield server


async def store_state(data_dir: Path) -> Any:
    """Every table's row count and every item's state: what a refusal must leave alone."""

    async def both(store: Any) -> Any:
        counts = (await info.info(store)).rows
        found = [(i.id, i.state, i.attempt, i.version) for i in await operations.pending(store)]
        return counts, found

    return await e2e.read(data_dir, both)


async def test_every_bad_number_gets_a_reply_and_changes_nothing(
    bot: e2e.BotProcess, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    first, _ = e2e.two_cards(api)
    before = await store_state(tmp_path / "data")
    largest = f"from 1 to {operations.MAX_ID}"
    for command, shown in [
        ("/history 99999999999999999999999999", "'99999999999999999999999"),
        ("/history ²", "'²'"),
        ("/replay 0", "'0'"),
        ("/replay -4", "'-4'"),
        ("/history #9223372036854775808", "'#9223372036854775808'"),
    ]:
        word = command.split()[0]
        reply = e2e.command(api, command)
        assert reply == (
            f"the item id must be a whole number {largest}, not {shown}; "
            f"usage: {word} <item id>, for example {word} 12"
        ), command
    # A button whose tag is right but whose numbers are out of range (only the key's
    # holder could make one): answered, never an internal error.
    key = callbacks.derive_key(e2e.TOKEN)
    for button in (
        callbacks.Button("approve", 10**19, 1, 1),
        callbacks.Button("approve", item_id=e2e.item_id_of(first), attempt=0, version=1),
    ):
        data = callbacks.encode(key, button)
        query = api.inject_callback(e2e.OPERATOR, e2e.OPERATOR, first.message_id, data)
        assert e2e.answer_to(api, query)["text"] == "this button's data is malformed"
    assert await store_state(tmp_path / "data") == before
    assert "handler failed" not in bot.log.read_text()


async def test_an_edit_prompt_still_works_after_a_restart(
    bot: e2e.BotProcess, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    first, _ = e2e.two_cards(api)
    item_id = e2e.item_id_of(first)
    e2e.tap(api, e2e.OPERATOR, first, "Edit")
    prompt = api.wait_for(lambda: [m for m in api.sent(e2e.OPERATOR) if "tap the draft" in m.text])
    # The prompt is recorded once Telegram has given its message id; then the kill.
    for _ in range(100):
        asked = await e2e.read(
            tmp_path / "data", lambda s: prompts.get(s, e2e.OPERATOR, prompt[0].message_id)
        )
        if asked is not None:
            break
        await asyncio.sleep(0.05)
    assert asked is not None and (asked.item_id, asked.version) == (item_id, 1)
    bot.kill()
    bot.start()
    api.inject_message(
        e2e.OPERATOR, e2e.OPERATOR, "Rewritten after a restart", prompt[0].message_id
    )
    new_card = api.wait_for(
        lambda: [m for m in e2e.cards(api) if "Rewritten after a restart" in m.text], timeout=20
    )[0]
    assert "version 2" in new_card.text
    item = await e2e.read(tmp_path / "data", lambda s: items.get(s, item_id))
    assert (item.state, item.version) == (State.AWAITING_APPROVAL, 2)
    # The prompt is answered: a second reply to it is refused and changes nothing.
    before = await store_state(tmp_path / "data")
    sent = len(api.sent(e2e.OPERATOR))
    api.inject_message(e2e.OPERATOR, e2e.OPERATOR, "Once more", prompt[0].message_id)
    refusal = api.wait_for(lambda: api.sent(e2e.OPERATOR)[sent:], timeout=10)
    assert refusal[-1].text == "That prompt is no longer open: tap Edit on the card again."
    assert await store_state(tmp_path / "data") == before


async def test_titles_show_once_and_unescaped_once(
    bot: e2e.BotProcess, api: localapi.LocalBotApi
) -> None:
    at_t, zero = sorted(e2e.two_cards(api), key=lambda m: m.message_id)
    assert at_t.text.count(AT_T) == 1
    assert "Zerowidth story" in zero.text and "\u200b" not in zero.text
    assert zero.text.count("Zerowidth story") == 1


async def test_a_strangers_text_never_reaches_the_log_even_at_debug(
    bot: e2e.BotProcess, api: localapi.LocalBotApi
) -> None:
    e2e.two_cards(api)
    secret = "stranger-words-7f3a"
    update = api.inject_message(e2e.STRANGER, e2e.STRANGER, f"hello {secret}")
    # The operator's command afterwards is a barrier: the stranger's update was processed.
    assert e2e.command(api, "/help").startswith("gatehouse")
    assert bot.stop() == 0
    log = bot.log.read_text()
    assert " DEBUG " in log and "Processing update" in log  # python-telegram-bot did log
    assert f"update {update['update_id']} (message from {e2e.STRANGER})" in log
    assert secret not in log


def test_plain_text_and_an_ignored_argument_get_an_answer(
    bot: e2e.BotProcess, api: localapi.LocalBotApi
) -> None:
    # Silence reads as a dead bot: text that is no command and no reply is answered.
    e2e.two_cards(api)
    before = len(api.sent(e2e.OPERATOR))
    api.inject_message(e2e.OPERATOR, e2e.OPERATOR, "approve the first one please")
    answer = api.wait_for(lambda: api.sent(e2e.OPERATOR)[before:], timeout=10)[0].text
    assert "this was neither, so nothing changed" in answer and "/help" in answer
    refused = e2e.command(api, "/budget foo")
    assert refused == "/budget takes nothing or chart, not “foo”: /budget [chart]"
    assert "No budgets configured" in e2e.command(api, "/budget")
