"""Approval taps through the local Bot API server: gatehouse against a bare PTB app.

    python -m bench bot [--taps N] [--feed-items M]

Both apps run in this process against their own local Bot API server over real HTTP,
with the product's default limits: PTB's AIORateLimiter at 30 requests/s overall, new
messages at 1/s per chat, and 60 taps a minute per operator. So that the cards can be
sent at those rates, N cards are spread over several operators, each approving its own
pipeline (one chat each, at most TAPS_PER_OPERATOR taps each). One tap at a time:
inject a tap on a card, wait until the card is edited. The gatehouse side runs the
product's own `bot.app.serve` with the engine runtime, so a tap is verified, decided in
the store (vote, transition, event, outbox rows) and the card edited from the outbox
row. The bare app answers the tap and edits the message.

Half the taps come while nothing else runs (`p50_ms`, `p99_ms`, `ratio` of approvals
per second against the bare app); the other half while the engine runs ticks back to
back over a feed of M new items with 500 approved drafts in the duplicate window
(`p99_during_tick_ms`), whose cards go to a chat of their own;
`tick_items_per_s_during_taps` is what those ticks ran at meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("PTB_TIMEDELTA", "1")

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.ext import AIORateLimiter, ApplicationBuilder, CallbackQueryHandler, ContextTypes

from bench import common, loop
from bench import tick as tick_bench
from bot import app
from bot import settings as settings_mod
from bot.demo.botapi import localapi
from pipelines.approval import flow
from pipelines.config import spec
from pipelines.runs import engine
from pipelines.service import runtime as runtime_mod
from store import backend, drafts, items
from store.items.machine import State
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss

TOKEN = "424242:bench-token-not-secret_abcdefghijklmnop"  # noqa: S105 (a fake)
#: Taps per operator: well inside the default 60 a minute, over both phases.
TAPS_PER_OPERATOR = 10
#: The operator approving the feed pipeline, whose cards arrive during the ticks.
WATCHER = 1000
FIRST_OPERATOR = 77
PIPELINE = """\
name: {name}
schedule: manual
sources:
  - type: rss
    url: {url}
    scope: {name}
approval:
  operators: [{operator}]
dispatch:
  type: none
"""
Card = tuple[int, int, str]  # chat, message id, callback data


async def _taps(api: localapi.LocalBotApi, cards: list[Card]) -> list[float]:
    """Tap each card once, in turn; milliseconds from the tap to the edited card."""
    samples = []
    for chat, message_id, data in cards:
        started = time.perf_counter()
        api.inject_callback(chat, chat, message_id, data)
        await api.await_for(_edited(api, chat, message_id), 10)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _edited(api: localapi.LocalBotApi, chat: int, message_id: int) -> Callable[[], bool]:
    return lambda: api.history(chat, message_id)[-1].version > 1


def _figures(samples: list[float], elapsed: float) -> dict[str, float]:
    return {
        "approvals_per_s": round(len(samples) / elapsed, 1),
        "p50_ms": round(common.percentile(samples, 50), 2),
        "p99_ms": round(common.percentile(samples, 99), 2),
    }


async def _measure(api: localapi.LocalBotApi, cards: list[Card]) -> dict[str, float]:
    started = time.perf_counter()
    samples = await _taps(api, cards)
    return _figures(samples, time.perf_counter() - started)


def _operators(taps: int) -> list[int]:
    count = -(-taps // TAPS_PER_OPERATOR)
    return [FIRST_OPERATOR + n for n in range(count)]


def _seed(pipelines: list[spec.Pipeline], n: int, now: datetime) -> Callable[[backend.Conn], None]:
    """n items awaiting approval in each pipeline, each with its card queued, as the
    engine leaves them; queued in turn across the pipelines (and so across the chats)."""

    def unit(conn: backend.Conn) -> None:
        for i in range(n):
            for pipeline in pipelines:
                payload = {"title": f"t{i}"}
                item = items.create_sync(conn, pipeline.name, "bench", f"g{i}", payload, now)
                assert item is not None
                items.transition_sync(conn, item.id, State.DRAFTING, "system", now)
                draft = drafts.add_sync(
                    conn, item.id, drafts.Body(f"draft {i}", {"drafter": "bench"}), now
                )
                item = items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", now)
                flow.queue_card(conn, pipeline, item, flow.Card(draft), now)

    return unit


def _write_pipelines(directory: Path, operators: list[int], feed_url: str) -> None:
    directory.mkdir()
    for operator in operators:
        name = f"bench{operator}"
        text = PIPELINE.format(name=name, url="http://127.0.0.1:9/unused.xml", operator=operator)
        (directory / f"{name}.yaml").write_text(text)
    feed = PIPELINE.format(name="feed", url=feed_url, operator=WATCHER)
    (directory / "feed.yaml").write_text(feed)


async def _ticks_until(
    runtime: runtime_mod.Runtime, feeds: FeedServer, size: int, done: asyncio.Event
) -> list[float]:
    """Ticks of the feed pipeline back to back, each over `size` new items, until done;
    the seconds each took."""
    seconds: list[float] = []
    while not done.is_set():
        # Made on a thread: the feed is another machine's work, and writing 800 kB of XML
        # on the loop (about 35 ms) would stall the taps measured beside it.
        feed = await asyncio.to_thread(_feed, size, len(seconds))
        feeds.set("/feed.xml", feed)
        started = time.perf_counter()
        await runtime.engine.tick("feed", "manual", runtime.now())
        seconds.append(time.perf_counter() - started)
    return seconds


def _feed(size: int, tick: int) -> str:
    entries = tick_bench.feed_entries(size, HISTORY)
    return rss([(f"t{tick}-{g}", t, b) for g, t, b in entries])


HISTORY = tick_bench.approved_stories(engine.DUPLICATE_LOOKBACK)


async def gatehouse(taps: int, feed_items: int, tmp: Path) -> dict[str, float]:
    operators = _operators(taps)
    with localapi.LocalBotApi(token=TOKEN) as api, FeedServer() as feeds:
        _write_pipelines(tmp / "pipelines", operators, feeds.url("/feed.xml"))
        cfg = settings_mod.load(
            data_dir=tmp / "data",
            pipelines_dir=tmp / "pipelines",
            telegram={
                "token": TOKEN,
                "base_url": api.base_url,
                "operators": [*operators, WATCHER],
            },
        )
        config = runtime_mod.RuntimeConfig(
            store=settings_mod.store_config(cfg), pipelines_dir=tmp / "pipelines"
        )
        runtime = await runtime_mod.Runtime.start(config)
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(cfg, TOKEN, runtime, stop))
        try:
            earlier = datetime.now(UTC) - timedelta(seconds=10)  # past the automatic floor
            per_operator = -(-taps // len(operators))
            tapped = [runtime.pipelines[f"bench{operator}"] for operator in operators]
            await runtime.store.write(_seed(tapped, per_operator, earlier))
            feed = runtime.pipelines["feed"]
            await runtime.store.write(tick_bench.seed_history(feed, HISTORY, earlier))
            wanted = per_operator * len(operators)
            await api.await_for(lambda: len(api.sent()) >= wanted, 60 + wanted)
            # Round-robin over the operators, so no one's taps come in a burst.
            by_chat = [
                [(m.chat_id, m.message_id, _approve(m.reply_markup)) for m in api.sent(chat)]
                for chat in operators
            ]
            cards = [card for turn in zip(*by_chat, strict=True) for card in turn][:taps]
            quiet, busy = cards[: taps // 2], cards[taps // 2 :]
            figures = await _measure(api, quiet)
            done = asyncio.Event()
            async with loop.LoopTicker() as ticker:
                ticking = asyncio.create_task(_ticks_until(runtime, feeds, feed_items, done))
                await asyncio.sleep(0.05)  # the first tick is under way
                during = await _taps(api, busy)
                done.set()
                ticks = await ticking
            return {
                **figures,
                "p99_during_tick_ms": round(common.percentile(during, 99), 2),
                "p50_during_tick_ms": round(common.percentile(during, 50), 2),
                "ticks_during_taps": len(ticks),
                "tick_items_per_s_during_taps": round(feed_items / common.median(ticks)),
                "max_loop_stall_during_tick_ms": round(ticker.max_stall * 1000, 1),
            }
        finally:
            stop.set()
            await serving
            await runtime.stop()


def _approve(markup: dict[str, Any] | None) -> str:
    assert markup is not None
    return str(markup["inline_keyboard"][0][0]["callback_data"])


async def _answer_and_edit(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    query = update.callback_query
    assert query is not None
    await query.answer("approved")
    await query.edit_message_text(f"approved by {query.from_user.id}")


async def bare(taps: int) -> dict[str, float]:
    with localapi.LocalBotApi(token=TOKEN) as api:
        limiter = AIORateLimiter(max_retries=1)  # PTB's defaults: 30 requests/s overall
        builder = ApplicationBuilder().token(TOKEN).base_url(api.base_url).rate_limiter(limiter)
        application = builder.build()
        application.add_handler(CallbackQueryHandler(_answer_and_edit))
        keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("Approve", callback_data="a")]])
        async with application:
            await application.start()
            assert application.updater is not None
            await application.updater.start_polling(poll_interval=0, timeout=1)
            try:
                cards: list[Card] = []
                for i in range(taps // 2):
                    message = await application.bot.send_message(
                        FIRST_OPERATOR, f"draft {i}", reply_markup=keyboard
                    )
                    cards.append((FIRST_OPERATOR, message.message_id, "a"))
                # Let the limiter's bucket refill, as it has for gatehouse's cards.
                await asyncio.sleep(2)
                return await _measure(api, cards)
            finally:
                await application.updater.stop()
                await application.stop()


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench bot")
    parser.add_argument("--taps", type=int, default=200)
    parser.add_argument("--feed-items", type=int, default=1000, help="new items per tick")
    args = common.parse(parser, argv, taps=20, feed_items=100)
    with tempfile.TemporaryDirectory() as tmp:
        ours = await gatehouse(args.taps, args.feed_items, Path(tmp))
    theirs = await bare(args.taps)
    figures: dict[str, Any] = {
        "bench": "bot",
        "taps": args.taps,
        "rate_limiter": "default",
        **ours,
        "bare_approvals_per_s": theirs["approvals_per_s"],
        "bare_p50_ms": theirs["p50_ms"],
        "bare_p99_ms": theirs["p99_ms"],
        "ratio": round(ours["approvals_per_s"] / theirs["approvals_per_s"], 3),
    }
    common.report(figures)
