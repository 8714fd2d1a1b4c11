"""A pipeline's forum topic, named in its file, made once: against a real store and the
local Bot API server over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime

import pytest
from telegram import Bot

from bot.chat.rooms import Rooms
from bot.demo.botapi import localapi
from pipelines.config import spec
from store import db

TOKEN = "555222:rooms-test-token_abcdefghijklmnopqrstu"
FORUM = -1001500
ANA = 1001
TEAM = spec.Pipeline.model_validate(
    {
        "name": "team",
        "schedule": "1h",
        "sources": [{"type": "rss", "url": "http://127.0.0.1:9/feed.xml", "scope": "s"}],
        "approval": {"operators": [ANA], "chat": FORUM, "topic": "Releases"},
        "dispatch": {"type": "file", "path": "/tmp/never-written"},
    }
)


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        server.add_group(FORUM, "Review room", [ANA], forum=True)
        yield server


async def test_a_named_topic_is_created_once_and_found_again_at_the_next_start(
    store: db.Store, api: localapi.LocalBotApi, bot: Bot, now: datetime
) -> None:
    first = Rooms(store, {"team": TEAM})
    await first.prepare(bot, now)
    [thread] = api.topics(FORUM)
    assert api.topics(FORUM) == {thread: "Releases"}
    again = Rooms(store, {"team": TEAM})
    await again.prepare(bot, now)
    assert (first.thread("team"), again.thread("team")) == (thread, thread)
    assert len(api.calls("createForumTopic")) == 1


async def test_workers_starting_at_once_leave_one_topic(
    store: db.Store, api: localapi.LocalBotApi, bot: Bot, now: datetime
) -> None:
    """Both find no topic stored and both create one; the store keeps the first, and
    the worker whose topic lost deletes it."""
    workers = [Rooms(store, {"team": TEAM}) for _ in range(2)]
    # The first create answers late, so the second worker finds no topic stored either,
    # however busy the machine.
    api.slow_next("createForumTopic", 1.0)
    await asyncio.gather(*(rooms.prepare(bot, now) for rooms in workers))
    assert len(api.calls("createForumTopic")) == 2  # the race happened
    [kept] = api.topics(FORUM)
    assert api.topics(FORUM) == {kept: "Releases"}
    assert [rooms.thread("team") for rooms in workers] == [kept, kept]
