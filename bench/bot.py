"""Approval taps through the local Bot API server: gatehouse against a bare PTB app.

    python -m bench bot [--taps N]

Both apps run in this process against their own local Bot API server over real HTTP,
with the same AIORateLimiter (its overall rate raised, as the local server has no flood
limit). One tap at a time: inject a tap on a card, wait until the card is edited. The
gatehouse side runs the product's own `bot.app.serve` with the engine runtime, so a tap
is verified, decided in the store (vote, transition, event, outbox rows) and the card
edited from the outbox row. The bare app answers the tap and edits the message.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("PTB_TIMEDELTA", "1")

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.ext import AIORateLimiter, ApplicationBuilder, CallbackQueryHandler, ContextTypes

from bench import common
from bot import app, localapi
from bot import settings as settings_mod
from pipelines import approval, config
from pipelines import runtime as runtime_mod
from store import drafts, items
from store.machine import State

TOKEN = "424242:bench-token-not-secret_abcdefghijklmnop"  # noqa: S105 (a fake)
OPERATOR = 77
#: The local server has no flood limit; both apps get the same raised limiter.
FLOOD_LIMIT = 10_000.0
PIPELINE = """\
name: bench
schedule: manual
sources:
  - type: rss
    url: http://127.0.0.1:9/unused.xml
    scope: bench
dispatch:
  type: none
"""


async def _taps(api: localapi.LocalBotApi, cards: list[tuple[int, str]]) -> list[float]:
    """Tap each card once, in turn; milliseconds from the tap to the edited card."""
    samples = []
    for message_id, data in cards:
        started = time.perf_counter()
        api.inject_callback(OPERATOR, OPERATOR, message_id, data)
        await api.await_for(_edited(api, message_id), 10)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _edited(api: localapi.LocalBotApi, message_id: int) -> Callable[[], bool]:
    return lambda: api.history(OPERATOR, message_id)[-1].version > 1


def _figures(samples: list[float], elapsed: float) -> dict[str, float]:
    return {
        "approvals_per_s": round(len(samples) / elapsed, 1),
        "p50_ms": round(common.percentile(samples, 50), 2),
        "p99_ms": round(common.percentile(samples, 99), 2),
    }


async def _measure(api: localapi.LocalBotApi, cards: list[tuple[int, str]]) -> dict[str, float]:
    started = time.perf_counter()
    samples = await _taps(api, cards)
    return _figures(samples, time.perf_counter() - started)


def _seed(pipeline: config.Pipeline, n: int, now: datetime) -> Callable[[sqlite3.Connection], None]:
    """n items awaiting approval, each with its card queued, as the engine leaves them."""

    def unit(conn: sqlite3.Connection) -> None:
        for i in range(n):
            item = items.create_sync(conn, "bench", "bench", f"g{i}", {"title": f"t{i}"}, now)
            assert item is not None
            items.transition_sync(conn, item.id, State.DRAFTING, "system", now)
            draft = drafts.add_sync(conn, item.id, f"draft {i}", {"drafter": "bench"}, now)
            item = items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", now)
            approval.queue_card(conn, pipeline, item, draft, now)

    return unit


async def gatehouse(taps: int, tmp: Path) -> dict[str, float]:
    (tmp / "pipelines").mkdir()
    (tmp / "pipelines" / "bench.yaml").write_text(PIPELINE)
    with localapi.LocalBotApi(token=TOKEN) as api:
        cfg = settings_mod.load(
            data_dir=tmp / "data",
            pipelines_dir=tmp / "pipelines",
            telegram={
                "token": TOKEN,
                "base_url": api.base_url,
                "operators": [OPERATOR],
                "rate_limit_per_minute": 0,
                "flood_limit_per_second": FLOOD_LIMIT,
                "chat_messages_per_second": FLOOD_LIMIT,
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
            await runtime.store.write(_seed(runtime.pipelines["bench"], taps, earlier))
            await api.await_for(lambda: len(api.sent(OPERATOR)) >= taps, 60)
            sent = api.sent(OPERATOR)
            cards = [(m.message_id, _approve(m.reply_markup)) for m in sent]
            return await _measure(api, cards)
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
        limiter = AIORateLimiter(overall_max_rate=FLOOD_LIMIT, max_retries=1)
        builder = ApplicationBuilder().token(TOKEN).base_url(api.base_url).rate_limiter(limiter)
        application = builder.build()
        application.add_handler(CallbackQueryHandler(_answer_and_edit))
        keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("Approve", callback_data="a")]])
        async with application:
            await application.start()
            assert application.updater is not None
            await application.updater.start_polling(poll_interval=0, timeout=1)
            try:
                cards = []
                for i in range(taps):
                    message = await application.bot.send_message(
                        OPERATOR, f"draft {i}", reply_markup=keyboard
                    )
                    cards.append((message.message_id, "a"))
                return await _measure(api, cards)
            finally:
                await application.updater.stop()
                await application.stop()


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench bot")
    parser.add_argument("--taps", type=int, default=300)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        ours = await gatehouse(args.taps, Path(tmp))
    theirs = await bare(args.taps)
    figures: dict[str, Any] = {
        "bench": "bot",
        "taps": args.taps,
        **ours,
        "bare_approvals_per_s": theirs["approvals_per_s"],
        "bare_p50_ms": theirs["p50_ms"],
        "bare_p99_ms": theirs["p99_ms"],
        "ratio": round(ours["approvals_per_s"] / theirs["approvals_per_s"], 3),
    }
    common.report(figures)
