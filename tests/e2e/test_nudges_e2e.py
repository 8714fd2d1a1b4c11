"""End to end with a clock the test moves: the real bot (its application, runtime and
workers, in this process) against the local Bot API server, a local feed and the fake
LLM. A reminder and an escalation, a digest, and a redraft whose note reaches the
model's request."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot import app
from bot import settings as settings_mod
from bot.demo.botapi import localapi
from pipelines.service import nudges
from pipelines.service import runtime as runtime_mod
from store import db, items, ledger
from store.audit import events
from store.items.machine import State
from store.ledger import prices as ledger_prices
from tests.e2e import test_bot_e2e as e2e
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM

TOKEN, OPERATOR, BROUGHT_IN = e2e.TOKEN, e2e.OPERATOR, 2002

PIPELINE = """\
name: news
schedule: 1h
sources:
  - type: rss
    url: {url}
    scope: e2e-news
{draft}
approval:
  operators: [{operator}]
  undo_window: 0s
{approval}
dispatch:
  type: file
  path: {out}
"""


class Clock:
    """The wall clock, moved forward by `offset`."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclasses.dataclass
class Bot:
    api: localapi.LocalBotApi
    runtime: runtime_mod.Runtime
    clock: Clock


@pytest.fixture
def feed() -> Iterator[FeedServer]:
    with FeedServer() as server:
        entries = [("g1", "First story", "Body one"), ("g2", "Second story", "Body two")]
        server.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        yield server


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path, feed: FeedServer, approval: str, *, draft: str = "", llm: Any = None,
    **runtime: Any,
) -> AsyncIterator[Bot]:  # fmt: skip
    pipelines_dir, data_dir = tmp_path / "pipelines", tmp_path / "data"
    pipelines_dir.mkdir(exist_ok=True)  # a test may have put its prompt file there
    (pipelines_dir / "news.yaml").write_text(
        PIPELINE.format(
            url=feed.url("/feed.xml"),
            out=tmp_path / "out",
            draft=draft,
            operator=OPERATOR,
            approval=approval,
        )
    )
    clock = Clock()
    with localapi.LocalBotApi(token=TOKEN) as api:
        telegram = settings_mod.TelegramSettings(
            token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
            base_url=api.base_url,
            operators=[OPERATOR, BROUGHT_IN],
            rate_limit_per_minute=0,
        )
        cfg = settings_mod.Settings(
            data_dir=data_dir, pipelines_dir=pipelines_dir, telegram=telegram, **(llm or {})
        )
        application = app.build(cfg, TOKEN)
        config = dataclasses.replace(app.runtime_config(cfg, application), clock=clock, **runtime)
        started = await runtime_mod.Runtime.start(config)
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(cfg, TOKEN, started, stop, application))
        try:
            yield Bot(api, started, clock)
        finally:
            stop.set()
            await serving
            await started.stop()


@pytest.fixture(autouse=True)
def quick_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nudges, "CHECK_EVERY_S", 0.2)


def card_texts(api: localapi.LocalBotApi, chat: int) -> list[Any]:
    return [m for m in api.sent(chat) if m.reply_markup and "📝" in m.text]


async def trail(bot: Bot, item_id: int) -> list[events.Event]:
    return await events.for_entity(bot.runtime.store, "item", item_id)


async def test_a_reminder_and_an_escalation_with_a_moved_clock(
    tmp_path: Path, feed: FeedServer
) -> None:
    rules = f"  remind_after: 1h\n  escalate_after: 2h\n  escalate_to: [{BROUGHT_IN}]"
    async with running(tmp_path, feed, rules) as bot:
        api = bot.api
        card = (await api.await_for(lambda: card_texts(api, OPERATOR)[:1], timeout=60))[0]
        item_id = e2e.item_id_of(card)
        # Not yet an approver of this pipeline: refused, nothing recorded.
        query = api.inject_callback(
            OPERATOR, BROUGHT_IN, card.message_id, e2e.button(card, "Approve")
        )
        answer = (await api.await_for(lambda: answers(api, query), timeout=10))[0]
        assert "not among news's approvers" in answer["text"]

        bot.clock.offset = timedelta(minutes=61)
        words = f"Reminder: item {item_id} "
        reminder = (await api.await_for(lambda: told(api, words), timeout=20))[0]
        assert reminder.reply_to_message_id == card.message_id  # a reply, no new card
        assert f"item {item_id} (news) has waited" in reminder.text
        assert not card_texts(api, BROUGHT_IN)
        reminded = (await trail(bot, item_id))[-1]
        assert (reminded.actor, reminded.reason) == (
            "sweep",
            "reminded the approvers after 1 h 1 min",
        )

        bot.clock.offset = timedelta(minutes=122)
        brought = (await api.await_for(lambda: mine(api, BROUGHT_IN, item_id), timeout=20))[0]
        assert "escalated to you" in brought.text and f"item {item_id}" in brought.text
        escalated = (await trail(bot, item_id))[-1]
        assert escalated.reason == f"escalated to {BROUGHT_IN} after 2 h 2 min"
        # One reminder and one escalation, however many passes.
        await asyncio.sleep(0.6)
        assert len(told(api, words)) == 1 and len(mine(api, BROUGHT_IN, item_id)) == 1

        query = api.inject_callback(
            BROUGHT_IN, BROUGHT_IN, brought.message_id, e2e.button(brought, "Approve")
        )
        assert (await api.await_for(lambda: answers(api, query), timeout=10))[0]["text"] == (
            "✅ approved"
        )
        moved = [e for e in await trail(bot, item_id) if e.to_state == State.APPROVED]
        assert [e.actor for e in moved] == [events.operator(BROUGHT_IN)]
        # Both copies of the card show the decision.
        for chat, message in ((OPERATOR, card), (BROUGHT_IN, brought)):
            await api.await_for(
                lambda c=chat, m=message: "approved by" in api.history(c, m.message_id)[-1].text,
                timeout=10,
            )


def mine(api: localapi.LocalBotApi, chat: int, item_id: int) -> list[Any]:
    return [m for m in card_texts(api, chat) if f"item {item_id}\n" in m.text]


def answers(api: localapi.LocalBotApi, query_id: str) -> list[dict[str, Any]]:
    return [a for a in api.callback_answers() if a["callback_query_id"] == query_id]


def told(api: localapi.LocalBotApi, words: str, chat: int = OPERATOR) -> list[Any]:
    return [m for m in api.sent(chat) if words in m.text]


async def test_a_digest_lists_what_waits_with_buttons_for_all(
    tmp_path: Path, feed: FeedServer
) -> None:
    slot = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    rules = f'  digest: "{slot.minute} {slot.hour} * * *"'
    async with running(tmp_path, feed, rules) as bot:
        api, store = bot.api, bot.runtime.store

        async def both_waiting() -> bool:
            return len(await items.in_state(store, State.AWAITING_APPROVAL)) == 2

        for _ in range(300):
            if await both_waiting():
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.6)
        assert not card_texts(api, OPERATOR) and not told(api, "📋")  # no card per item

        bot.clock.offset = slot - datetime.now(UTC) + timedelta(seconds=2)
        digest = (await api.await_for(lambda: told(api, "📋 news"), timeout=20))[0]
        assert "2 awaiting approval" in digest.text and "First story" in digest.text
        e2e_tap = api.inject_callback(
            OPERATOR, OPERATOR, digest.message_id, e2e.button(digest, "Approve all 2")
        )
        await api.await_for(lambda: answers(api, e2e_tap), timeout=10)
        confirm = await api.await_for(
            lambda: (m := api.history(OPERATOR, digest.message_id)[-1]).version > 1 and m,
            timeout=10,
        )
        yes = api.inject_callback(
            OPERATOR, OPERATOR, digest.message_id, e2e.button(confirm, "Yes, approve 2")
        )
        assert (await api.await_for(lambda: answers(api, yes), timeout=10))[0]["text"] == (
            "2 of 2 approved"
        )
        await asyncio.sleep(0.6)
        assert len(told(api, "📋 news")) == 1  # once per slot


async def test_redraft_passes_the_note_to_the_model(tmp_path: Path, feed: FeedServer) -> None:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "prompt.txt").write_text("Write a post about {title}.\n{text}\n")
    draft = "draft:\n  drafter: llm\n  prompt: prompt.txt"
    with FakeLLM() as model:
        llm = {
            "llm": {"kind": "openai", "base_url": model.base_url, "api_key": "k", "model": "m"},
            "prices": {"m": ledger_prices.Price(input_micros_per_mtok=1, output_micros_per_mtok=1)},
        }
        await set_budget(tmp_path / "data")
        async with running(tmp_path, feed, "", draft=draft, llm=llm) as bot:
            api = bot.api
            card = (await api.await_for(lambda: card_texts(api, OPERATOR)[:1], timeout=60))[0]
            item_id = e2e.item_id_of(card)
            assert "drafter llm" in card.text
            calls = model.calls
            await tap(api, card, "Reject")
            reasons = await api.await_for(lambda: with_label(api, card, "off-topic"), timeout=10)
            await tap(api, reasons, "off-topic")
            rejected = await api.await_for(lambda: with_label(api, card, "Redraft"), timeout=10)
            await tap(api, rejected, "Redraft")
            asked = (await api.await_for(lambda: told(api, "next draft?"), timeout=10))[-1]
            # Past the floor between automatic entries into drafting (store.items.machine.FLOOR).
            bot.clock.offset = timedelta(seconds=6)
            api.inject_message(
                OPERATOR, OPERATOR, "Name the city in the first line", asked.message_id
            )

            new = (await api.await_for(lambda: attempt_two(api), timeout=30))[0]
            assert f"item {item_id}" in new.text
            assert model.calls == calls + 1
            assert "redrafted with the note: “Name the city in the first line”" in new.text
            sent = model.requests[-1].body["messages"][-1]["content"]
            assert "Their instruction: Name the city in the first line" in sent
            trail_ = await trail(bot, item_id)
            replayed = next(e for e in trail_ if e.to_state == State.NEW and e.attempt == 2)
            assert replayed.reason == (
                f"redraft asked by operator:{OPERATOR}: Name the city in the first line"
            )
            assert "redraft asked by" in api.history(OPERATOR, card.message_id)[-1].text


async def tap(api: localapi.LocalBotApi, message: Any, label: str) -> dict[str, Any]:
    query = api.inject_callback(OPERATOR, OPERATOR, message.message_id, e2e.button(message, label))
    found: list[dict[str, Any]] = await api.await_for(lambda: answers(api, query), timeout=10)
    return found[0]


def attempt_two(api: localapi.LocalBotApi) -> list[Any]:
    return [m for m in card_texts(api, OPERATOR) if "attempt 2" in m.text]


def with_label(api: localapi.LocalBotApi, message: Any, label: str) -> Any:
    now = api.history(OPERATOR, message.message_id)[-1]
    return now if label in str(now.reply_markup) else None


async def set_budget(data_dir: Path) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await ledger.set_budget(
            store, ledger.Limit("global", "day", 5_000_000), "cli", datetime.now(UTC)
        )
    finally:
        await store.close()
