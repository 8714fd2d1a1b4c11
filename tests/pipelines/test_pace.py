"""Pacing a model's calls by what its provider states: the fake LLM over real sockets.

The fake answers in REPLY_S and states a limit of calls in flight, answering a 429 to
any call past it; many drafters call at once, and the calls in flight are sampled.
Times are generous bounds only: what is asserted is counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from pipelines.providers import client as providers
from pipelines.providers import limits, pace
from tests.fakes.llm_server import FakeLLM

REPLY_S = 0.5
#: Drafters calling at once: more than any limit here, so turns are always wanted.
CALLERS = 120
#: The longest any wait here may take (seconds): a bound, never a figure asserted.
PATIENCE_S = 20.0


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM(delay_s=REPLY_S) as fake:
        yield fake


def client(fake: FakeLLM, model: str = "m-1", **overrides: Any) -> providers.ProviderClient:
    values: dict[str, Any] = {
        "kind": "openai",
        "base_url": fake.base_url,
        "api_key": SecretStr("k"),
        "model": model,
        "max_concurrent_calls": 64,
        "max_retries": 0,
    }
    return providers.ProviderClient(providers.ProviderSettings(**(values | overrides)))


async def ask(provider: providers.ProviderClient, max_tokens: int = 100) -> None:
    async with provider.turn(max_tokens):
        await provider.complete("sys", "prompt", max_tokens=max_tokens)


@contextlib.asynccontextmanager
async def calling(provider: providers.ProviderClient) -> AsyncIterator[None]:
    """CALLERS drafters asking again and again until the block ends."""

    async def caller() -> None:
        while True:
            with contextlib.suppress(providers.ProviderError):
                await ask(provider)

    tasks = [asyncio.create_task(caller()) for _ in range(CALLERS)]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def settle(check: Any) -> None:
    """Wait until `check()` is true, within PATIENCE_S."""
    deadline = time.monotonic() + PATIENCE_S
    while not check():
        assert time.monotonic() < deadline, "did not settle"
        await asyncio.sleep(0.05)


async def sample(fake: FakeLLM, provider: providers.ProviderClient, seconds: float) -> list[int]:
    """Calls in flight at the fake, sampled over `seconds`; the client never holds more
    turns than its limit meanwhile."""
    seen = []
    for _ in range(int(seconds / 0.05)):
        now = provider.pace.snapshot()
        assert now.in_flight <= now.limit
        seen.append(fake.in_flight)
        await asyncio.sleep(0.05)
    return seen


async def test_calls_in_flight_settle_at_the_stated_limit_with_no_429(llm: FakeLLM) -> None:
    llm.stated_limit = 40
    async with client(llm) as provider, calling(provider):
        await settle(lambda: provider.pace.snapshot().limit == 40)
        seen = await sample(llm, provider, 2.0)
        assert provider.pace.snapshot().in_flight == 40  # not 16, the old fixed figure
    assert max(seen) >= 36  # the gaps are only a reply's bookkeeping
    assert llm.peak_in_flight <= 40 and llm.rate_limited == 0
    assert provider.pace.snapshot().stated == 40


async def test_calls_in_flight_follow_a_lowered_limit(llm: FakeLLM) -> None:
    llm.stated_limit = 40
    async with client(llm) as provider, calling(provider):
        await settle(lambda: provider.pace.snapshot().limit == 40)
        answered = llm.calls
        llm.stated_limit = 20
        await settle(lambda: provider.pace.snapshot().limit == 20)
        assert llm.calls - answered <= 40 + 10  # within a round of answers, and a few
        await asyncio.sleep(2 * REPLY_S)  # the calls begun at 40 are answered
        seen = await sample(llm, provider, 1.0)
    assert max(seen) <= 20 and max(seen) >= 16


async def test_the_ceiling_caps_everything(llm: FakeLLM) -> None:
    llm.stated_limit = 40
    async with client(llm, max_concurrent_calls=8) as provider, calling(provider):
        await settle(lambda: llm.calls >= 40)
        seen = await sample(llm, provider, 1.0)
        snap = provider.pace.snapshot()
    assert snap.limit == 8 and snap.stated == 40 and snap.ceiling == 8
    assert llm.peak_in_flight <= 8 and max(seen) == 8


async def test_a_429_pauses_its_own_model_only() -> None:
    with FakeLLM() as slow, FakeLLM() as other:
        slow.queue_fault("429", retry_after=3)
        async with client(slow, "model-a") as a, client(other, "model-b") as b:
            with pytest.raises(providers.ProviderErrorAnswer):
                await ask(a)
            assert a.pace.paused_for() > 1
            waiting = asyncio.create_task(ask(a))
            for _ in range(5):  # the other model keeps going meanwhile
                await ask(b)
            await asyncio.sleep(0.3)
            assert slow.calls == 1 and not waiting.done()
            assert a.pace.snapshot().rate_limited_last_hour == 1
            assert b.pace.snapshot().rate_limited_last_hour == 0
            await asyncio.wait_for(waiting, PATIENCE_S)  # the pause ends: the call goes
    assert slow.calls == 2 and other.calls == 5


async def test_a_call_begun_in_a_pause_longer_than_its_retry_budget_is_not_made() -> None:
    with FakeLLM() as llm:
        llm.queue_fault("429", retry_after=5)
        async with client(llm, max_retry_wait_s=1) as provider:
            with pytest.raises(providers.ProviderErrorAnswer):
                await ask(provider)
            # A caller that held its turn as the 429 came: nothing sent, nothing charged.
            with pytest.raises(providers.ProviderErrorAnswer, match="paused"):
                await provider.complete("sys", "prompt", max_tokens=10)
    assert llm.calls == 1


async def test_too_few_tokens_left_makes_a_call_wait_for_the_reset() -> None:
    with FakeLLM() as llm:
        llm.stated_limit = 10
        llm.stated_tokens = 100
        llm.tokens_reset_s = 2.0
        async with client(llm) as provider:
            await ask(provider, max_tokens=50)  # nothing was said yet; 100 left after
            await ask(provider, max_tokens=50)  # 100 left: it fits
            waiting = asyncio.create_task(ask(provider, max_tokens=800))
            await asyncio.sleep(0.5)
            assert llm.calls == 2 and not waiting.done()
            await asyncio.wait_for(waiting, PATIENCE_S)
    assert llm.calls == 3


async def test_each_open_client_shows_in_the_snapshot(llm: FakeLLM) -> None:
    async with client(llm, "model-z") as provider:
        await ask(provider)
        mine = [s for s in pace.snapshot() if s.model == "model-z"]
    assert mine and mine[0].in_flight == 0 and mine[0].stated is None
    assert not [s for s in pace.snapshot() if s.model == "model-z"]  # closed: not listed


# -- the pieces: a gate whose limit changes, and the headers read -------------------------


async def test_a_gate_lowered_keeps_its_holders_and_raised_wakes_waiters() -> None:
    gate = pace.Gate(2)
    await gate.acquire()
    await gate.acquire()
    gate.set_limit(1)  # both keep their turn; a newcomer waits for the count to fall below 1
    waiting = asyncio.create_task(gate.acquire())
    gate.release()
    await asyncio.sleep(0.05)
    assert not waiting.done() and gate.held == 1
    gate.set_limit(3)
    await asyncio.wait_for(waiting, PATIENCE_S)
    assert gate.held == 2


async def test_a_cancelled_waiter_passes_its_turn_on() -> None:
    gate = pace.Gate(1)
    await gate.acquire()
    first = asyncio.create_task(gate.acquire())
    second = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0.01)
    gate.release()
    await asyncio.sleep(0)  # the wake-up reaches `first`, which is cancelled before it runs
    first.cancel()
    await asyncio.wait_for(second, 2.0)
    assert gate.held == 1


def test_openai_and_anthropic_headers_are_read() -> None:
    now = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    openai = limits.read(
        {
            "X-RateLimit-Limit-Requests": "500",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-reset-requests": "6m0s",
            "x-ratelimit-remaining-tokens": "149984",
            "x-ratelimit-reset-tokens": "20ms",
        },
        now,
    )
    assert openai == limits.Stated(500, 499, 360.0, 149984, 0.02)
    anthropic = limits.read(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": "2025-03-01T12:00:30Z",
            "anthropic-ratelimit-tokens-remaining": "7000",
        },
        now,
    )
    assert anthropic == limits.Stated(50, 0, 30.0, 7000, None)
    assert limits.read({"x-ratelimit-limit-requests": "many"}, now) == limits.Stated()
    assert limits.duration_s("1h2m3.5s") == 3723.5 and limits.duration_s("2x") is None
