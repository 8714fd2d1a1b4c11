"""A team reviewing together in a group, end to end: the real bot against the local Bot
API server, which plays a forum supergroup with three operators and one member who is
not, then a group Telegram upgrades to a supergroup mid-run, then a group that takes
away the bot's right to post."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot import app
from bot import settings as settings_mod
from bot.demo.botapi import localapi
from pipelines.operations import review
from pipelines.service import runtime as runtime_mod
from store import items
from store.audit import events
from store.items.machine import State
from tests.e2e import test_bot_e2e as e2e
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer

TOKEN = e2e.TOKEN
ANA, SAM, LI, STRANGER = 1001, 1002, 1003, 4004
OPERATORS = (ANA, SAM, LI)
FORUM, GROUP, SUPERGROUP = -1001500, -4001, -1004001
NAMES = {ANA: "Ana", SAM: "Sam", LI: "Li", STRANGER: "Max"}

PIPELINE = """\
name: team
schedule: 1h
sources:
  - type: rss
    url: {url}
    scope: team-room
approval:
  operators: [{ana}, {sam}, {li}]
  quorum: {quorum}
  undo_window: 0s
  chat: {chat}
{topic}
dispatch:
  type: file
  path: {out}
"""


@dataclasses.dataclass
class Room:
    api: localapi.LocalBotApi
    runtime: runtime_mod.Runtime
    feed: FeedServer


@pytest.fixture
def feed() -> Iterator[FeedServer]:
    with FeedServer() as server:
        entries = [("g1", "First release", "Body one"), ("g2", "Second release", "Body two")]
        server.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        yield server


@contextlib.asynccontextmanager
async def room(
    tmp_path: Path, feed: FeedServer, chat: int, *, forum: bool, topic: str = "",
    quorum: int = 2, username: str | None = None, listed_as: str | None = None,
    **pace: float,
) -> AsyncIterator[Room]:  # fmt: skip
    """The bot and engine in this process, one pipeline whose cards go to group `chat`
    (named by `@username` in the pipeline file when given)."""
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    (pipelines_dir / "team.yaml").write_text(
        PIPELINE.format(
            url=feed.url("/feed.xml"), ana=ANA, sam=SAM, li=LI,
            chat=f"'@{listed_as or username}'" if username else chat,
            topic=f"  topic: {topic}" if topic else "", out=tmp_path / "out", quorum=quorum,
        )
    )  # fmt: skip
    with localapi.LocalBotApi(token=TOKEN) as api:
        for user, name in NAMES.items():
            api.name_user(user, name)
        api.add_group(chat, "Review room", [*OPERATORS, STRANGER], forum=forum, username=username)
        telegram = settings_mod.TelegramSettings(
            token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
            base_url=api.base_url,
            operators=list(OPERATORS),
            rate_limit_per_minute=0,
            **({"group_messages_per_minute": 600} | pace),
        )
        cfg = settings_mod.Settings(
            data_dir=tmp_path / "data", pipelines_dir=pipelines_dir, telegram=telegram
        )
        application = app.build(cfg, TOKEN)
        runtime = await runtime_mod.Runtime.start(app.runtime_config(cfg, application))
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(cfg, TOKEN, runtime, stop, application))
        try:
            yield Room(api, runtime, feed)
        finally:
            stop.set()
            await serving
            await runtime.stop()


def cards(api: localapi.LocalBotApi, chat: int) -> list[Any]:
    return [m for m in api.sent(chat) if "📝 team · item" in m.text]


def latest(api: localapi.LocalBotApi, chat: int, message: Any) -> Any:
    return api.history(chat, message.message_id)[-1]


async def tap(api: localapi.LocalBotApi, chat: int, user: int, message: Any, label: str) -> str:
    query = api.inject_callback(chat, user, message.message_id, e2e.button(message, label))
    found = await api.await_for(
        lambda: [a for a in api.callback_answers() if a["callback_query_id"] == query], 10
    )
    return str(found[0]["text"])


async def test_a_forum_topic_holds_one_card_per_item_and_everyones_votes(
    tmp_path: Path, feed: FeedServer
) -> None:
    room_named = room(tmp_path, feed, FORUM, forum=True, topic="Releases", username="review_room")
    async with room_named as team:  # the file names the group by its @username
        api, store = team.api, team.runtime.store
        first, second = await api.await_for(
            lambda: cards(api, FORUM)[1:] and cards(api, FORUM), timeout=60
        )
        # The topic was created once, by name, and every card is in it; none went private.
        assert api.topics(FORUM) == {2: "Releases"}
        assert {first.message_thread_id, second.message_thread_id} == {2}
        assert not any(cards(api, user) for user in OPERATORS)
        item = e2e.item_id_of(first)

        # A member who is not an operator: answered, and nothing changes.
        before = await events.for_entity(store, "item", item)
        assert "not an operator" in await tap(api, FORUM, STRANGER, first, "Approve")
        assert await events.for_entity(store, "item", item) == before

        # The first vote shows on the one card, for everyone.
        said = await tap(api, FORUM, ANA, first, "Approve")
        assert said == "your vote is in: 1 of 2 (waiting for 1 more of Sam, Li)"
        await api.await_for(
            lambda: "✅ Ana · waiting for 1 more of Sam, Li" in latest(api, FORUM, first).text, 10
        )
        assert "Approve" in str(latest(api, FORUM, first).reply_markup)  # still open
        # The second member's vote reaches the quorum; the card ends with who and where.
        assert await tap(api, FORUM, SAM, latest(api, FORUM, first), "Approve") == "✅ approved"
        done = await api.await_for(
            lambda: "📤" in (m := latest(api, FORUM, first)).text and m, timeout=15
        )
        assert "approved by Ana, Sam" in done.text and "wrote" in done.text
        assert (await items.get(store, item)).state == State.DISPATCHED

        # Edit from the group: the prompt names who tapped, in the same topic, and the
        # reply becomes the next version's card there.
        await tap(api, FORUM, LI, second, "Edit")
        prompt = await api.await_for(
            lambda: [m for m in api.sent(FORUM) if "tap the draft to copy it" in m.text], 10
        )
        assert prompt[0].text.startswith("Li, ") and prompt[0].message_thread_id == 2
        assert prompt[0].reply_markup == {
            "force_reply": True, "selective": True,
            "input_field_placeholder": "your text becomes the new draft",
        }  # fmt: skip
        api.inject_message(FORUM, LI, "Second release, in Li's words", prompt[0].message_id)
        new = await api.await_for(
            lambda: [m for m in cards(api, FORUM) if "in Li's words" in m.text], 15
        )
        assert new[0].message_thread_id == 2

        # An admin deleted a card: the next edit finds it gone and sends a fresh one there.
        api.state.delete(FORUM, new[0].message_id)
        typed = review.Typed("approve", e2e.item_id_of(new[0]), "cli:ana")
        await review.at_terminal(store, team.runtime.pipelines, typed, team.runtime.now())
        fresh = await api.await_for(
            lambda: [m for m in cards(api, FORUM) if "in Li's words" in m.text], 15
        )
        assert fresh[0].message_id != new[0].message_id and fresh[0].message_thread_id == 2

        # Commands work in the group for operators; a stranger gets nothing back.
        api.inject_command(FORUM, ANA, "/status@gatehouse_local_bot")
        await api.await_for(lambda: [m for m in api.sent(FORUM) if "gatehouse ·" in m.text], 10)
        count = len(api.sent(FORUM))
        api.inject_command(FORUM, STRANGER, "/status@gatehouse_local_bot")
        api.inject_command(FORUM, ANA, "/help")
        await api.await_for(lambda: [m for m in api.sent(FORUM) if "/replay" in m.text], 10)
        assert len(api.sent(FORUM)) == count + 1  # the operator's /help alone


async def test_a_group_upgraded_mid_run_then_closed_to_the_bot(
    tmp_path: Path, feed: FeedServer
) -> None:
    async with room(tmp_path, feed, GROUP, forum=False) as team:
        api, store = team.api, team.runtime.store
        first, second = await api.await_for(
            lambda: cards(api, GROUP)[1:] and cards(api, GROUP), timeout=60
        )
        api.migrate_group(GROUP, SUPERGROUP, by_user_id=ANA)

        # Taps now come from the supergroup; the card there is the one edited.
        moved = api.history(SUPERGROUP, first.message_id)[-1]
        await tap(api, SUPERGROUP, ANA, moved, "Approve")
        await tap(api, SUPERGROUP, SAM, moved, "Approve")
        await api.await_for(
            lambda: "approved by Ana, Sam" in latest(api, SUPERGROUP, first).text, 15
        )
        assert len(api.history(GROUP, first.message_id)) == 1  # nothing went to the old id

        # The next card goes to the new id.
        entries = [("g1", "First release", "Body one"), ("g2", "Second release", "Body two"),
                   ("g3", "Third release", "Body three")]  # fmt: skip
        team.feed.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        assert team.runtime.scheduler is not None
        await team.runtime.scheduler.trigger("team", team.runtime.now())
        third = await api.await_for(
            lambda: [m for m in cards(api, SUPERGROUP) if "Third release" in m.text], 30
        )
        assert not [m for m in cards(api, GROUP) if "Third release" in m.text]
        assert third

        # The bot loses the right to post: each operator hears of it privately, and the
        # next card reaches them in their private chats instead.
        api.set_bot_status(SUPERGROUP, "restricted", by_user_id=ANA)
        entries.append(("g4", "Fourth release", "Body four"))
        team.feed.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        await team.runtime.scheduler.trigger("team", team.runtime.now())
        for user in OPERATORS:
            told = await api.await_for(
                lambda u=user: [
                    m for m in api.sent(u) if "approval cards cannot go to the group" in m.text
                ],
                30,
            )
            # Said by Telegram's member update, or by its refusal of the next card.
            why = told[0].text.lower()
            assert "may no longer send messages" in why or "not enough rights" in why
            await api.await_for(
                lambda u=user: [m for m in cards(api, u) if "Fourth release" in m.text], 30
            )
        assert (await items.get(store, e2e.item_id_of(second))).state == State.AWAITING_APPROVAL

        # An admin gives the right back: Telegram tells the bot, and cards go there again.
        api.set_bot_status(SUPERGROUP, "member", by_user_id=ANA)
        entries.append(("g5", "Fifth release", "Body five"))
        team.feed.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        await team.runtime.scheduler.trigger("team", team.runtime.now())
        await api.await_for(
            lambda: [m for m in cards(api, SUPERGROUP) if "Fifth release" in m.text], 30
        )
        assert not any("Fifth release" in m.text for u in OPERATORS for m in cards(api, u))


#: New messages per second into the group in the bulk test: fast enough for a test, and
#: well below what would let 50 cards out at once.
BULK_PACE = 10.0


async def test_approve_all_of_fifty_in_a_group_keeps_the_groups_pace(
    tmp_path: Path, feed: FeedServer
) -> None:
    entries = [(f"g{n}", f"Release {n}", f"Body {n}") for n in range(50)]
    feed.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
    async with room(
        tmp_path, feed, GROUP, forum=False, quorum=1, chat_messages_per_second=10 * BULK_PACE,
        group_messages_per_minute=BULK_PACE * 60,
    ) as team:  # fmt: skip
        api, store = team.api, team.runtime.store
        sent = await api.await_for(lambda: len(cards(api, GROUP)) == 50 and cards(api, GROUP), 60)
        # New messages into the group kept the pace: never more than the bucket holds
        # (BULK_PACE) plus what it refills in the time they took.
        times = [
            c.at for c in api.calls("sendMessage") if c.params.get("chat_id") in (GROUP, str(GROUP))
        ]
        assert len(times) == 50
        for first in range(len(times)):
            for last in range(first, len(times)):
                allowed = BULK_PACE + BULK_PACE * (times[last] - times[first]) + 1
                assert last - first + 1 <= allowed, (first, last, times[last] - times[first])

        api.inject_command(GROUP, ANA, "/pending")
        listing = (await api.await_for(
            lambda: [m for m in api.sent(GROUP) if "Approve all 50" in str(m.reply_markup)], 10
        ))[0]  # fmt: skip
        await tap(api, GROUP, ANA, listing, "Approve all 50")
        confirm = await api.await_for(
            lambda: "Yes, approve 50" in str((m := latest(api, GROUP, listing)).reply_markup) and m,
            10,
        )
        assert await tap(api, GROUP, ANA, confirm, "Yes, approve 50") == "50 of 50 approved"
        # One approval event per item, at once; the cards follow at the group's pace.
        for card in sent:
            trail = await events.for_entity(store, "item", e2e.item_id_of(card))
            assert [e.to_state for e in trail].count(State.APPROVED) == 1
        await api.await_for(
            lambda: all("approved by Ana" in latest(api, GROUP, c).text for c in sent), 60
        )


async def test_a_group_name_telegram_does_not_know_sends_the_cards_privately(
    tmp_path: Path, feed: FeedServer
) -> None:
    """A mistyped @username: each operator is told why, and the cards are not lost."""
    mistyped = room(
        tmp_path, feed, FORUM, forum=True, username="review_room", listed_as="reveiw_room"
    )
    async with mistyped as team:
        api = team.api
        for user in OPERATORS:
            told = await api.await_for(
                lambda u=user: [m for m in api.sent(u) if "cannot go to the group" in m.text], 30
            )
            assert "@reveiw_room: chat not found" in told[0].text.lower()
            await api.await_for(lambda u=user: cards(api, u)[1:], 30)  # both items, privately
        assert cards(api, FORUM) == []
