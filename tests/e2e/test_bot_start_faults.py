"""The real bot process (`python -m bot`) against the local Bot API server: an optional
start-up call that fails does not stop the bot, and /status reports its workers."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from telegram import Bot

from bot.demo.botapi import localapi
from bot.process import startup
from tests.e2e.test_bot_e2e import PIPELINE, TOKEN, BotProcess, command, two_cards
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


@pytest.fixture
def feed() -> Iterator[FeedServer]:
    with FeedServer() as server:
        stories = [("g1", "First story", "Body one"), ("g2", "Second story", "Body two")]
        server.set("/feed.xml", feeds.rss(stories), "application/rss+xml")
        yield server


def test_a_command_menu_answered_500_does_not_stop_start_up(
    tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer
) -> None:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "news.yaml").write_text(
        PIPELINE.format(url=feed.url("/feed.xml"), out=tmp_path / "out")
    )
    api.fail_next("setMyCommands", 500)
    process = BotProcess(tmp_path, api).start()
    try:
        two_cards(api)  # started: the engine ran and the sender delivered
        status = command(api, "/status")
        assert re.search(r"workers: all \d+ running", status), status
        # The menu is set by a retry in the background.
        api.wait_for(lambda: [c for c in api.calls("setMyCommands") if c.status == 200], timeout=15)
        assert [c.status for c in api.calls("setMyCommands")] == [500, 200]
    finally:
        code = process.stop()
    log = process.log.read_text()
    assert code == 0, log
    assert "command menu not set (NetworkError: Internal Server Error); retrying in 2 s" in log
    assert "Traceback" not in log and TOKEN not in log


async def test_the_command_menu_retries_server_errors_and_stops_at_a_refusal(
    api: localapi.LocalBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(startup, "MENU_FIRST_RETRY_S", 0.01)
    stop = asyncio.Event()
    async with Bot(TOKEN, base_url=api.base_url) as bot:
        api.fail_next("setMyCommands", 502)
        api.fail_next("setMyCommands", 500)
        assert await startup.publish_commands(bot, stop) is True
        assert [c.status for c in api.calls("setMyCommands")] == [502, 500, 200]
        api.fail_next("setMyCommands", 400, description="Bad Request: BOT_COMMAND_INVALID")
        assert await startup.publish_commands(bot, stop) is False  # a refusal is not retried
        assert len(api.calls("setMyCommands")) == 4
