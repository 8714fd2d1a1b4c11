"""A clean stop: SIGTERM while a run drafts. The real bot process (`gatehouse run`)
drafts a feed of many items with a slow fake LLM; SIGTERM arrives while calls are in
flight. It exits 0 with every event sealed and the newest one signed; the drafts already
paid for reach approval, the rest wait, untouched, for the next start, which drafts them.
Drafts that wait for a turn of the model's client when the signal comes begin nothing: a
stop starts no paid call, so none is cut off by the stop's grace and left uncertain."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.demo.botapi import localapi
from store import db
from store.audit import checkpoints
from tests.e2e.test_bot_e2e import BotProcess
from tests.e2e.test_nudges_e2e import set_budget
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM

#: More items than one round of the engine's concurrent drafts, so a stop finds some
#: drafting at the provider and others not begun.
ITEMS = 80
#: A slow model: SIGTERM comes while the first round's calls wait for it.
REPLY_DELAY_S = 2.0
PIPELINE = """\
name: news
schedule: 1h
sources:
  - type: rss
    url: {url}
draft:
  drafter: llm
  prompt: {prompt}
dispatch:
  type: none
"""


@pytest.fixture
def model() -> Iterator[FakeLLM]:
    with FakeLLM(delay_s=REPLY_DELAY_S) as server:
        yield server


@pytest.fixture
def many(feed: FeedServer) -> FeedServer:
    entries = [(f"s{n}", f"Story {n}", f"Body of story {n}.") for n in range(ITEMS)]
    feed.set("/many.xml", feeds.rss(entries), "application/rss+xml")
    return feed


def with_llm(process: BotProcess, model: FakeLLM) -> BotProcess:
    price = {"input_micros_per_mtok": 1, "output_micros_per_mtok": 1}
    process.env |= {
        "GATEHOUSE_LLM__KIND": "openai",
        "GATEHOUSE_LLM__BASE_URL": model.base_url,
        "GATEHOUSE_LLM__API_KEY": "local-test-key",
        "GATEHOUSE_LLM__MODEL": "m",
        "GATEHOUSE_PRICES": json.dumps({"m": price}),
    }
    return process


async def audit_state(data_dir: Path) -> dict[str, Any]:
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)

    def read(conn: Any) -> dict[str, Any]:
        one = lambda sql: conn.execute(sql).fetchone()  # noqa: E731
        states = conn.execute("SELECT state, count(*) FROM items GROUP BY state").fetchall()
        return {
            "unsealed": one("SELECT count(*) FROM events WHERE seq IS NULL")[0],
            "head": tuple(one("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1")),
            "items": dict(states),
        }

    try:
        found = await store.read(read)
        found["signed"] = await store.read(checkpoints.latest_sync)
        return found
    finally:
        await store.close()


def wait_until(check: Any, what: str, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def test_sigterm_while_drafting_seals_signs_and_exits_0(
    tmp_path: Path, api: localapi.LocalBotApi, many: FeedServer, model: FakeLLM
) -> None:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "prompt.txt").write_text("Write a post about {title}.\n{text}\n")
    (tmp_path / "pipelines" / "news.yaml").write_text(
        PIPELINE.format(url=many.url("/many.xml"), prompt="prompt.txt")
    )
    data = tmp_path / "data"
    asyncio.run(set_budget(data))
    bot = with_llm(BotProcess(tmp_path, api), model).start()
    try:
        wait_until(lambda: model.calls >= 1, "a draft reached the provider")
    finally:
        code = bot.stop()
    assert code == 0, bot.log.read_text()[-3000:]
    after = asyncio.run(audit_state(data))
    assert after["unsealed"] == 0, after
    signed = after["signed"]
    assert signed is not None and (signed.event_id, signed.hash) == after["head"], after
    # Stopped mid-run: what reached the provider became drafts, the rest wait untouched.
    assert after["items"].get("awaiting_approval", 0) == model.calls, after
    assert 0 < after["items"].get("awaiting_approval", 0) < ITEMS, after
    assert "failed" not in after["items"], after
    assert "audit head signed at shutdown" in bot.log.read_text()

    calls = model.calls  # the next start drafts the rest, each once
    bot = with_llm(BotProcess(tmp_path, api), model).start()
    try:
        wait_until(lambda: model.calls >= ITEMS, "the rest were drafted", within_s=120)
    finally:
        assert bot.stop() == 0
    assert model.calls == ITEMS and calls < ITEMS
    assert asyncio.run(audit_state(data))["items"] == {"awaiting_approval": ITEMS}


#: Drafts more than one round of the model client's turns (GATEHOUSE_LLM__MAX_CONCURRENT_CALLS).
TURNS = 16
WAITING_ITEMS = 30
#: Slower than the stop's grace allows for two rounds (runtime.STOP_WORK_S, 12 s, the
#: stop timeout the bot runs with): a draft that took its turn after the signal would be
#: cut off at the provider, its claim left started (14 of them before the fix).
SLOW_MODEL_S = 8.0


async def claim_states(data_dir: Path) -> dict[str, int]:
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    try:
        sql = "SELECT state, count(*) FROM claims GROUP BY state"
        return dict(await store.read(lambda conn: conn.execute(sql).fetchall()))
    finally:
        await store.close()


@pytest.mark.slow  # two starts and stops of the bot around an 8 s model
def test_sigterm_while_drafts_wait_for_a_turn_starts_no_new_call(
    tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer
) -> None:
    """SIGTERM while 16 drafts are at an 8 s model and 14 wait for a turn: the 16 finish,
    the 14 begin nothing (no claim, no call) and the next start drafts them."""
    entries = [(f"w{n}", f"Story {n}", f"Body of story {n}.") for n in range(WAITING_ITEMS)]
    feed.set("/waiting.xml", feeds.rss(entries), "application/rss+xml")
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "prompt.txt").write_text("Write a post about {title}.\n{text}\n")
    (tmp_path / "pipelines" / "news.yaml").write_text(
        PIPELINE.format(url=feed.url("/waiting.xml"), prompt="prompt.txt")
    )
    data = tmp_path / "data"
    asyncio.run(set_budget(data))
    with FakeLLM(delay_s=SLOW_MODEL_S) as model:
        bot = with_llm(BotProcess(tmp_path, api), model)
        bot.env["GATEHOUSE_LLM__MAX_CONCURRENT_CALLS"] = str(TURNS)
        bot.start()
        try:
            wait_until(lambda: model.calls >= TURNS, "a round of drafts reached the provider")
        finally:
            code = bot.stop()
        assert code == 0, bot.log.read_text()[-3000:]
        claims_after_stop = asyncio.run(claim_states(data))
        assert claims_after_stop == {"settled": TURNS}, claims_after_stop
        assert model.calls == TURNS, "drafts that waited for a turn called the provider"
        items_after_stop = asyncio.run(audit_state(data))["items"]
        assert items_after_stop == {
            "awaiting_approval": TURNS,
            "drafting": WAITING_ITEMS - TURNS,
        }, items_after_stop

        bot = with_llm(BotProcess(tmp_path, api), model).start()
        try:
            wait_until(lambda: model.calls >= WAITING_ITEMS, "the rest drafted", within_s=120)
        finally:
            assert bot.stop() == 0  # the calls in flight finish within the stop's grace
    assert model.calls == WAITING_ITEMS
    assert asyncio.run(audit_state(data))["items"] == {"awaiting_approval": WAITING_ITEMS}
    assert asyncio.run(claim_states(data)) == {"settled": WAITING_ITEMS}
