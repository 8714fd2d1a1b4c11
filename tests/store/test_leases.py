"""The leader's lease: one holder per term, renewed only by its holder, taken once lapsed."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from store import db
from store.cluster import leases

TTL = timedelta(seconds=6)


async def test_the_first_worker_is_elected_and_the_second_waits(
    store: db.Store, now: datetime
) -> None:
    assert await leases.acquire(store, leases.Bid("leader", "a", None), now, TTL) == 1
    assert (
        await leases.acquire(
            store, leases.Bid("leader", "b", None), now + timedelta(seconds=5), TTL
        )
        is None
    )
    assert await leases.get(store, "leader") == leases.Lease("leader", "a", 1, now, now + TTL)


async def test_a_lease_is_live_up_to_its_expiry_as_the_store_holds_it(
    store: db.Store, now: datetime
) -> None:
    await leases.acquire(store, leases.Bid("leader", "a", None), now, TTL)
    lease = await leases.get(store, "leader")
    assert lease is not None
    tick = timedelta(milliseconds=1)
    assert lease.live(now + TTL) and not lease.live(now + TTL + tick)
    # The store agrees to the millisecond: at the expiry the holder still renews and
    # nobody takes over; a millisecond later it is the next worker's.
    assert await leases.acquire(store, leases.Bid("leader", "b", None), now + TTL, TTL) is None
    assert await leases.acquire(store, leases.Bid("leader", "a", 1), now + TTL, TTL) == 1
    renewed = await leases.get(store, "leader")
    assert renewed == leases.Lease("leader", "a", 1, now, now + TTL * 2)
    assert (
        await leases.acquire(store, leases.Bid("leader", "b", None), now + TTL * 2 + tick, TTL) == 2
    )


async def test_only_the_holder_renews_in_its_term_and_before_it_lapses(
    store: db.Store, now: datetime
) -> None:
    await leases.acquire(store, leases.Bid("leader", "a", None), now, TTL)
    assert (
        await leases.acquire(store, leases.Bid("leader", "a", 1), now + timedelta(seconds=2), TTL)
        == 1
    )
    # Another worker naming a's term is still not a.
    assert (
        await leases.acquire(store, leases.Bid("leader", "b", 1), now + timedelta(seconds=3), TTL)
        is None
    )
    lease = await leases.get(store, "leader")
    assert lease is not None and lease.expires_at == now + timedelta(seconds=2) + TTL


async def test_a_lapsed_lease_goes_to_the_next_worker_in_a_new_term(
    store: db.Store, now: datetime
) -> None:
    await leases.acquire(store, leases.Bid("leader", "a", None), now, TTL)
    later = now + TTL + timedelta(milliseconds=1)
    assert await leases.acquire(store, leases.Bid("leader", "b", None), later, TTL) == 2
    # The old holder's renewal in its own term finds the lease gone.
    assert await leases.acquire(store, leases.Bid("leader", "a", 1), later, TTL) is None
    assert await leases.get(store, "leader") == leases.Lease("leader", "b", 2, later, later + TTL)


async def test_a_holder_whose_lease_lapsed_gets_it_back_only_in_a_new_term(
    store: db.Store, now: datetime
) -> None:
    """Nobody took the lease meanwhile, yet the renewal is refused: the new term tells the
    worker that it held nothing for a while (another may have acted as leader)."""
    await leases.acquire(store, leases.Bid("leader", "a", None), now, TTL)
    later = now + TTL + timedelta(milliseconds=1)
    assert await leases.acquire(store, leases.Bid("leader", "a", 1), later, TTL) == 2
    # Its old term is over for good: naming it renews nothing, even for the same worker.
    assert (
        await leases.acquire(store, leases.Bid("leader", "a", 1), later + timedelta(seconds=1), TTL)
        is None
    )
    assert await leases.get(store, "leader") == leases.Lease("leader", "a", 2, later, later + TTL)


async def test_a_released_lease_is_taken_at_once(store: db.Store, now: datetime) -> None:
    await leases.acquire(store, leases.Bid("leader", "a", None), now, TTL)
    await leases.release(store, "leader", "a", 1, now + timedelta(seconds=1))
    assert (
        await leases.acquire(
            store, leases.Bid("leader", "b", None), now + timedelta(seconds=1), TTL
        )
        == 2
    )


async def test_only_the_holder_in_its_term_releases(store: db.Store, now: datetime) -> None:
    await leases.acquire(store, leases.Bid("leader", "a", None), now, TTL)
    later = now + TTL + timedelta(milliseconds=1)
    assert await leases.acquire(store, leases.Bid("leader", "a", 1), later, TTL) == 2
    held = await leases.get(store, "leader")
    await leases.release(store, "leader", "b", 2, later)  # not the holder
    await leases.release(store, "leader", "a", 1, later)  # the holder, in its old term
    assert await leases.get(store, "leader") == held
    await leases.release(store, "leader", "a", 2, later)
    assert await leases.acquire(store, leases.Bid("leader", "b", None), later, TTL) == 3


async def test_a_release_in_an_old_term_changes_nothing(store: db.Store, now: datetime) -> None:
    await leases.acquire(store, leases.Bid("leader", "a", None), now, TTL)
    later = now + TTL * 2
    await leases.acquire(store, leases.Bid("leader", "b", None), later, TTL)
    await leases.release(store, "leader", "a", 1, later)
    assert await leases.acquire(store, leases.Bid("leader", "c", None), later, TTL) is None


async def test_steal_takes_a_live_lease_for_a_store_one_process_holds(
    store: db.Store, now: datetime
) -> None:
    await leases.acquire(store, leases.Bid("leader", "crashed", None), now, TTL)
    assert await leases.acquire(store, leases.Bid("leader", "me", None), now, TTL, steal=True) == 2


async def test_workers_racing_for_the_lease_elect_exactly_one(
    store: db.Store, now: datetime
) -> None:
    won = await asyncio.gather(
        *(leases.acquire(store, leases.Bid("leader", f"w{i}", None), now, TTL) for i in range(16))
    )
    assert sorted(term for term in won if term is not None) == [1]
    later = now + TTL * 2
    won = await asyncio.gather(
        *(leases.acquire(store, leases.Bid("leader", f"w{i}", None), later, TTL) for i in range(16))
    )
    assert sorted(term for term in won if term is not None) == [2]
