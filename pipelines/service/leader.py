"""Leadership: the one worker that polls Telegram, sends cards and alerts and runs the
sweeps, among the workers sharing a store.

    leader = Leadership(store, me.id, ttl, clock, registry)
    leader.lead("outbox-sender", lambda stop: sender.run(stop))   # runs only while leading
    await leader.step()        # elect or renew; the runtime calls it every `renew_every_s`
    leader.trusted()           # True while this worker may act as the leader
    await leader.stand_down()  # at a clean stop: duties end, then the lease is given up

The lease (store.cluster.leases) lasts `ttl` from the moment a renewal was asked for. The
leader trusts itself for only three quarters of that, counted on the event loop's
monotonic clock from before it asked, and renews every quarter: one failed renewal
is absorbed, a second ends its trust a quarter of the TTL before any other worker
can take the lease over. A renewal is written on a connection of its own
(`store.write_now`), never behind the worker's own work, and is given up after half
the TTL, when an answer could earn at most a quarter of trust (the next step asks
again). When trust ends, by a lost or failed renewal or by the timer set at each
renewal (a store call that hangs does not delay it), every duty's stop event is set;
the duties are supervised workers that finish the row in hand.

On a store only one process can open (SQLite), that process is the only worker: it
takes the lease over at once, even from its own crashed predecessor.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from pipelines.service import workers
from store import errors
from store.cluster import leases
from store.db import Store

log = logging.getLogger(__name__)

#: The lease's name in the store.
LEASE = "leader"
#: The lease's default length (seconds). A new leader takes over within about this
#: long after the old one died; a renewal costs one small write every quarter of it.
TTL_S = 6.0
#: Duties get this long to finish the work in hand when the leader stands down (seconds).
STAND_DOWN_S = 10.0

#: A leader-only worker: runs until its stop event is set.
Duty = Callable[[asyncio.Event], Awaitable[None]]


class Leadership:
    def __init__(
        self,
        store: Store,
        holder: str,
        ttl: timedelta,
        clock: Callable[[], datetime],
        registry: workers.Registry,
        *,
        exclusive: bool = False,
    ) -> None:
        self.store = store
        self.holder = holder
        self.ttl = ttl
        self._clock = clock
        self._registry = registry
        self._exclusive = exclusive
        #: The term this worker leads in, or None.
        self.term: int | None = None
        self._trusted_until = float("-inf")
        self._duties: dict[str, Duty] = {}
        self._stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._expiry: asyncio.TimerHandle | None = None
        #: Run once standing down, after every duty ended, while the lease is still held.
        self._finals: dict[str, Callable[[], Awaitable[object]]] = {}
        #: Set by stand_down: this worker leads no more in this process's life.
        self._closed = False

    @property
    def renew_every_s(self) -> float:
        return self.ttl.total_seconds() / 4

    @property
    def renew_deadline_s(self) -> float:
        """How long a renewal may take: half the TTL, well inside the trust it earns."""
        return self.ttl.total_seconds() / 2

    @property
    def leading(self) -> bool:
        return self._stop is not None

    def _monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def trusted(self) -> bool:
        """Whether this worker may act as the leader now."""
        return self.leading and self._monotonic() < self._trusted_until

    def trust_left_s(self) -> float:
        """Seconds this worker may still act as the leader without another renewal."""
        return max(self._trusted_until - self._monotonic(), 0.0) if self.leading else 0.0

    def lead(self, name: str, duty: Duty) -> None:
        """Run `duty` as the worker `name` whenever this worker leads."""
        self._duties[name] = duty
        if self._stop is not None:
            self._start(name, duty, self._stop)
        else:
            self._registry.standby(name)

    def at_stand_down(self, name: str, final: Callable[[], Awaitable[object]]) -> None:
        """Run `final` (once, under `name`) when this worker stands down as the leader:
        after every duty has ended and before the lease goes, so nothing else of this
        process writes meanwhile (the audit head is signed there)."""
        self._finals[name] = final

    async def step(self) -> bool:
        """Elect or renew once; True while leading. A store error keeps the trust
        already earned (the timer still ends it in time)."""
        if self._closed:
            return False
        asked, bid = self._monotonic(), leases.Bid(LEASE, self.holder, self.term)
        try:
            async with asyncio.timeout(self.renew_deadline_s):
                term = await leases.acquire(
                    self.store, bid, self._clock(), self.ttl, steal=self._exclusive
                )
        except TimeoutError:
            # The next step asks again; the trust already earned still holds, and its
            # timer ends it in time.
            log.warning("leader lease not renewed within %g s", self.renew_deadline_s)
            return self.trusted()
        except errors.StoreError as exc:
            log.warning("leader lease not renewed: %s", exc)
            return self.trusted()
        took = self._monotonic() - asked
        if took > self.renew_every_s:  # each such renewal eats into the trust it earns
            log.warning(
                "leader lease renewal took %.1f s (TTL %g s)", took, self.ttl.total_seconds()
            )
        if term is None or term != self.term:
            self._lose("lease lost" if self.leading else "")
        if term is None:
            return False
        self._trusted_until = asked + self.ttl.total_seconds() * 3 / 4
        self._arm_expiry()
        if not self.leading:
            self._gain(term)
        return True

    def _arm_expiry(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        loop = asyncio.get_running_loop()
        self._expiry = loop.call_at(self._trusted_until, self._expire)

    def _expire(self) -> None:
        if self.leading and not self.trusted():
            self._lose("lease not renewed in time")

    def _gain(self, term: int) -> None:
        self.term = term
        self._stop = asyncio.Event()
        log.info("leading in term %d as %s", term, self.holder)
        for name, duty in self._duties.items():
            self._start(name, duty, self._stop)

    def _start(self, name: str, duty: Duty, stop: asyncio.Event) -> None:
        task = self._registry.spawn(name, lambda: duty(stop), stop)
        task.add_done_callback(lambda _: self._registry.standby(name))
        self._tasks = [t for t in self._tasks if not t.done()] + [task]

    def _lose(self, why: str, level: int = logging.WARNING) -> None:
        if self._stop is not None:
            log.log(level, "no longer leading (term %s): %s", self.term, why)
            self._stop.set()
        self._stop = None
        self.term = None
        self._trusted_until = float("-inf")

    async def _run_finals(self) -> None:
        for name, final in self._finals.items():
            try:
                await asyncio.wait_for(final(), STAND_DOWN_S)
            except Exception:  # logged; the lease is released all the same
                log.exception("%s failed while standing down", name)

    async def stand_down(self) -> None:
        """Stop the duties (they finish what they hold), then give the lease up for good."""
        self._closed = True
        term = self.term
        self._lose("standing down", logging.INFO)
        if self._expiry is not None:
            self._expiry.cancel()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=STAND_DOWN_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if term is not None:
            await self._run_finals()
            try:
                await leases.release(self.store, LEASE, self.holder, term, self._clock())
            except errors.StoreError as exc:
                log.warning("leader lease not released (it lapses by itself): %s", exc)
