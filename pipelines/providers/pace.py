"""At a model's pace: as many calls in flight as its provider allows, no more.

    pacer = Pacer("gpt-4o-mini", ceiling=settings.max_concurrent_calls)
    async with pacer.turn(tokens=800):     # waits for a turn and for room at the provider
        ...                                # the call; then, for each answer:
    pacer.heard(response.status_code, response.headers, now)

Every answer says how much room is left (pipelines/providers/limits.py), and the number
of turns (`limit`) follows it, additive increase, multiplicative decrease:

- it starts at START_CALLS (or the ceiling, if lower): today's tried value;
- each 2xx answer with room left (requests remaining above zero, or not said) adds one;
- it is never above the limit of requests the provider last stated, nor above the
  ceiling (the setting `max_concurrent_calls`), nor below 1;
- a 429 halves it and pauses the model: no turn starts until its `retry-after` (or
  PAUSE_S when it says nothing) has passed.

Besides the count, a turn does not start while the provider said no request or too few
tokens are left (the tokens a turn asks for: its call's max_tokens) until that count's
reset; each turn that starts takes one request and its tokens from what was said, until
the next answer says again. So the provider is told no more than it said it would take.

One Pacer per client, and so per model: a model's limits slow its own pipelines only.
`snapshot()` lists every live pacer of this process, for /status, `gatehouse status`
(through the control socket's ping) and /metrics.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from pipelines.ground import retry
from pipelines.providers import limits

#: Turns at the start, before the provider said anything: the fixed figure used before
#: pacing (16 calls), known to be taken by the providers gatehouse speaks.
START_CALLS = 16
#: The pause after a 429 that does not say how long to wait (seconds).
PAUSE_S = 1.0
#: How long a stated "none left" holds when the provider gave no reset (seconds), so a
#: model never waits forever on a count that nothing will renew.
DEFAULT_RESET_S = 1.0
#: The window of the 429 count shown to the operator (seconds).
RATE_LIMITED_WINDOW_S = 3600.0


class Gate:
    """A semaphore whose limit can change while it is held.

    At most `limit` holders at once; lowering the limit takes no turn away from a holder,
    it only makes newcomers wait until the holders fall below it. Waiters sleep on an
    asyncio.Condition and are woken one per free turn, never polled.
    """

    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._held = 0
        self._free = asyncio.Condition()
        #: Wake-ups in flight (held so the event loop does not drop them).
        self._wakes: set[asyncio.Task[None]] = set()

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def held(self) -> int:
        return self._held

    async def acquire(self) -> None:
        async with self._free:
            try:
                await self._free.wait_for(lambda: self._held < self._limit)
            except asyncio.CancelledError:
                # A wake-up this waiter took as it was cancelled must not be lost.
                self._free.notify()
                raise
            self._held += 1

    def release(self) -> None:
        """Synchronous, so a cancelled holder's `finally` always gives its turn back."""
        self._held -= 1
        self._wake()

    def set_limit(self, limit: int) -> None:
        raised = limit > self._limit
        self._limit = max(1, limit)
        if raised:
            self._wake()

    def _wake(self) -> None:
        # Notifying needs the condition's lock, which only a coroutine can wait for: a
        # small task does it, and release() stays synchronous.
        if self._held < self._limit:
            task = asyncio.get_running_loop().create_task(self._notify())
            self._wakes.add(task)
            task.add_done_callback(self._wakes.discard)

    async def _notify(self) -> None:
        async with self._free:
            self._free.notify(self._limit - self._held)


@dataclass(frozen=True)
class Snapshot:
    """One model's pace, as the operator reads it."""

    model: str
    in_flight: int
    #: Turns allowed now (the pacer's own figure).
    limit: int
    #: The limit of requests the provider last stated; None before it said one.
    stated: int | None
    ceiling: int
    rate_limited_last_hour: int
    #: 429s since this process started (a Prometheus counter).
    rate_limited_total: int


@dataclass
class _Count:
    """A count the provider stated, less what turns took since, valid until `until`."""

    left: int
    until: float


class Pacer:
    """The turns of one model's calls; see the module docstring."""

    def __init__(self, model: str, *, ceiling: int) -> None:
        self.model = model
        self.ceiling = max(1, ceiling)
        self.stated: int | None = None
        self._gate = Gate(min(self.ceiling, START_CALLS))
        self._news = asyncio.Condition()
        self._wakes: set[asyncio.Task[None]] = set()
        self._paused_until = 0.0
        self._requests: _Count | None = None
        self._tokens: _Count | None = None
        self._limited: collections.deque[float] = collections.deque()
        self._limited_total = 0
        _LIVE.add(self)

    @contextlib.asynccontextmanager
    async def turn(self, tokens: int = 0) -> AsyncIterator[None]:
        """Held while one call (with its retries) is made: a turn under the limit, taken
        once the provider has room for a request of `tokens` tokens."""
        await self._gate.acquire()
        try:
            await self._wait_for_room(tokens)
            yield
        finally:
            self._gate.release()

    def close(self) -> None:
        """Its client is closed: no longer listed by snapshot()."""
        _LIVE.discard(self)

    def paused_for(self) -> float:
        """Seconds until a 429's pause ends (0 when not paused)."""
        return max(0.0, self._paused_until - _clock())

    def heard(self, status: int, headers: Mapping[str, str], now: datetime) -> None:
        """Adapt to one answer: its stated limits, and a 429's pause."""
        stated = limits.read(headers, now)
        at = _clock()
        if stated.requests_limit is not None:
            self.stated = max(1, stated.requests_limit)
        if stated.requests_left is not None:
            self._requests = _Count(stated.requests_left, at + _reset(stated.requests_reset_s))
        if stated.tokens_left is not None:
            self._tokens = _Count(stated.tokens_left, at + _reset(stated.tokens_reset_s))
        limit = self._gate.limit
        if status == 429:
            self._limited.append(at)
            self._limited_total += 1
            wait = retry.retry_after_s(headers, now)
            self._paused_until = max(self._paused_until, at + (PAUSE_S if wait is None else wait))
            limit = limit // 2
        elif 200 <= status < 300 and (stated.requests_left is None or stated.requests_left > 0):
            limit += 1
        self._gate.set_limit(min(limit, self.stated or self.ceiling, self.ceiling))
        self._tell()

    def snapshot(self) -> Snapshot:
        at = _clock()
        while self._limited and self._limited[0] < at - RATE_LIMITED_WINDOW_S:
            self._limited.popleft()
        return Snapshot(
            self.model,
            self._gate.held,
            self._gate.limit,
            self.stated,
            self.ceiling,
            len(self._limited),
            self._limited_total,
        )

    async def _wait_for_room(self, tokens: int) -> None:
        async with self._news:
            while (wait := self._blocked_for(tokens)) is not None:
                # Woken by the next answer, or at the pause's end or the count's reset.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._news.wait(), wait)
            if self._requests is not None:
                self._requests.left -= 1
            if self._tokens is not None:
                self._tokens.left -= tokens

    def _blocked_for(self, tokens: int) -> float | None:
        """Seconds to wait before a call of `tokens` may start, or None if it may now."""
        at = _clock()
        if self._paused_until > at:
            return self._paused_until - at
        if self._requests is not None and self._requests.until <= at:
            self._requests = None  # reset: back to its limit, as far as anyone said
        if self._tokens is not None and self._tokens.until <= at:
            self._tokens = None
        if self._requests is not None and self._requests.left <= 0:
            return self._requests.until - at
        if self._tokens is not None and self._tokens.left < tokens:
            return self._tokens.until - at
        return None

    def _tell(self) -> None:
        """Wake the turns waiting for room: what the provider says has changed."""
        task = asyncio.get_running_loop().create_task(self._notify_all())
        self._wakes.add(task)
        task.add_done_callback(self._wakes.discard)

    async def _notify_all(self) -> None:
        async with self._news:
            self._news.notify_all()  # at most `limit` waiters: each holds a turn


#: Every live pacer of this process (a client that is gone drops out by itself).
_LIVE: weakref.WeakSet[Pacer] = weakref.WeakSet()


def snapshot() -> list[Snapshot]:
    """Each live model's pace in this process, by model."""
    return sorted((p.snapshot() for p in list(_LIVE)), key=lambda s: s.model)


def _reset(seconds: float | None) -> float:
    return DEFAULT_RESET_S if seconds is None else seconds


def _clock() -> float:
    return asyncio.get_running_loop().time()
