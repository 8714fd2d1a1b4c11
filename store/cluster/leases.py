"""Leases: one holder of a named role at a time, for a term, until the lease lapses.

    term = await leases.acquire(store, leases.Bid("leader", me, None), now, ttl)  # None: not won
    term = await leases.acquire(store, leases.Bid("leader", me, term), now, ttl)  # each ttl/4
    await leases.release(store, "leader", me, term, now)                   # at a clean stop

A lease is won by inserting its row (elect) or, once it lapsed, by taking it over in a
new term; only its holder in its term renews it, and only before it lapses. Two
workers can therefore never both renew: the row's own compare-and-set decides. How
long a holder trusts itself is the caller's business (pipelines.service.leader), which stops
acting before the lease can lapse. Times are the callers' clocks: workers sharing a
store keep their clocks in sync (NTP) to well within the lease's safety margin.
`acquire` writes with `store.write_now`: a renewal never waits behind its process's
own work.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from store import backend, clock, sql
from store.backends.core import Store

Q = sql.load("leases")


@dataclass(frozen=True)
class Lease(backend.Record):
    name: str
    holder: str
    term: int
    acquired_at: datetime
    expires_at: datetime

    def live(self, now: datetime) -> bool:
        return self.expires_at >= now


@dataclass(frozen=True)
class Bid:
    """Who asks for which lease: `holder` renews `term` if it still holds it (None: it
    holds no term yet), else wins the lease if it is free."""

    name: str
    holder: str
    term: int | None


def acquire_sync(
    conn: backend.Conn, bid: Bid, now: datetime, ttl: timedelta, *, steal: bool
) -> int | None:
    """Renew the bid's term if given and still ours, else win the lease if free; the term held.

    `steal` takes the lease even from a live holder: only for a store that one process
    alone can open (SQLite), whose earlier holder is therefore dead.
    """
    params = {
        "name": bid.name,
        "holder": bid.holder,
        "term": bid.term,
        "steal": int(steal),
        "now": clock.to_ms(now),
        "until": clock.to_ms(now + ttl),
    }
    if bid.term is not None:
        row = conn.execute(Q["renew"], params).fetchone()
        if row is not None:
            return int(row[0])
    for query in ("elect", "take_over"):
        row = conn.execute(Q[query], params).fetchone()
        if row is not None:
            return int(row[0])
    return None


async def acquire(
    store: Store, bid: Bid, now: datetime, ttl: timedelta, *, steal: bool = False
) -> int | None:
    return await store.write_now(lambda conn: acquire_sync(conn, bid, now, ttl, steal=steal))


async def release(store: Store, name: str, holder: str, term: int, now: datetime) -> None:
    params = {"name": name, "holder": holder, "term": term, "now": clock.to_ms(now)}
    await store.write_now(lambda conn: conn.execute(Q["release"], params))


def get_sync(conn: backend.Conn, name: str) -> Lease | None:
    return backend.fetch_one(conn, Q["get"], {"name": name}, Lease.from_row)


async def get(store: Store, name: str) -> Lease | None:
    return await store.read(lambda conn: get_sync(conn, name))
