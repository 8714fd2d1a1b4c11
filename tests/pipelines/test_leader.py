"""Leadership over a real store: one leader, duties only while leading, trust that ends
before the lease can lapse, and a new leader once the old one stops renewing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from pipelines.service import leader, workers
from store import db
from store.cluster import leases


def utcnow() -> datetime:
    return datetime.now(UTC)


def worker(
    store: db.Store, name: str, ttl: timedelta, registry: workers.Registry | None = None
) -> leader.Leadership:
    registry = registry or workers.Registry(store, utcnow)
    return leader.Leadership(store, name, ttl, utcnow, registry)


async def test_one_worker_leads_and_runs_the_duties(store: db.Store) -> None:
    ttl = timedelta(seconds=6)
    seen_a, seen_b = workers.Registry(store, utcnow), workers.Registry(store, utcnow)
    a, b = worker(store, "a", ttl, seen_a), worker(store, "b", ttl, seen_b)
    ran: list[str] = []

    def duty(name: str) -> leader.Duty:
        async def run(stop: asyncio.Event) -> None:
            ran.append(name)
            await stop.wait()

        return run

    a.lead("sender", duty("a"))
    b.lead("sender", duty("b"))
    assert await a.step() and not await b.step()
    await asyncio.sleep(0.05)
    assert ran == ["a"] and a.trusted() and not b.trusted()
    assert [s.status for s in seen_b.snapshot()] == ["standby"]
    await a.stand_down()
    assert [s.status for s in seen_a.snapshot()] == ["standby"]
    assert await b.step()  # released at a clean stop: taken at once
    await asyncio.sleep(0.05)
    assert ran == ["a", "b"]
    await b.stand_down()


async def test_a_silent_leader_stops_trusting_itself_before_anyone_takes_over(
    store: db.Store,
) -> None:
    ttl = timedelta(seconds=1.2)
    a, b = worker(store, "a", ttl), worker(store, "b", ttl)
    stopped = asyncio.Event()

    async def duty(stop: asyncio.Event) -> None:
        await stop.wait()
        stopped.set()

    a.lead("sweeps", duty)
    assert await a.step()
    # a stops renewing (hung, or cut off from the store); b keeps trying.
    overlap = []
    while not await b.step():
        overlap.append(a.trusted())
        await asyncio.sleep(0.02)
    assert not a.trusted() and stopped.is_set()
    assert overlap and overlap[0] and not overlap[-1]  # a trusted itself, then stopped
    lease = await leases.get(store, leader.LEASE)
    assert lease is not None and (lease.holder, lease.term) == ("b", 2)
    assert not await a.step()  # a comes back: b holds the lease
    await b.stand_down()


async def test_trust_is_three_quarters_of_the_ttl_from_before_the_renewal(
    store: db.Store,
) -> None:
    a = worker(store, "a", timedelta(seconds=8))
    await a.step()
    assert 5.0 < a.trust_left_s() <= 6.0
    await a.stand_down()
    assert not a.trusted() and a.trust_left_s() == 0.0


async def test_a_worker_that_stood_down_never_leads_again(store: db.Store) -> None:
    a = worker(store, "a", timedelta(seconds=6))
    assert await a.step()
    await a.stand_down()
    assert not await a.step() and not a.leading
    assert (await leases.get(store, leader.LEASE)) is not None
