"""The leader's renewal and the heartbeat never wait behind the worker's own work:
with every PostgreSQL write lane held by a long unit and more units queued, the lease
is still renewed and the worker's runs kept (`store.write_now`, a lane of its own)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipelines.service import leader, workers
from store import backend, db
from store.cluster import heartbeats, leases
from tests import pg_databases

#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 30.0


def utcnow() -> datetime:
    return datetime.now(UTC)


@pytest.fixture
async def pg_store(pg_run_database: pg_databases.Server, data_dir: Path) -> AsyncIterator[db.Store]:
    pg_run_database.empty_tables()
    store = await db.open(db.StoreConfig(data_dir=data_dir, database_url=pg_run_database.run_url))
    try:
        yield store
    finally:
        await store.close()


async def eventually(check: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WITHIN_S
    while loop.time() < deadline:
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


async def test_renewal_and_heartbeat_go_ahead_while_every_lane_is_held(
    pg_store: db.Store,
) -> None:
    lanes = pg_store.config.writers
    release = threading.Event()
    running: list[int] = []

    def long_unit(conn: backend.Conn) -> None:
        running.append(1)
        release.wait(WITHIN_S)  # the lane is held until the test lets go

    with db.foreground():  # taps' writes take every lane, the spare one too
        held = [asyncio.ensure_future(pg_store.write(long_unit)) for _ in range(lanes * 2)]
    try:
        await eventually(lambda: len(running) == lanes)
        ttl = timedelta(seconds=6)
        me = leader.Leadership(pg_store, "me", ttl, utcnow, workers.Registry(pg_store, utcnow))
        stepped = asyncio.ensure_future(me.step())
        beat = asyncio.ensure_future(
            heartbeats.beat(pg_store, heartbeats.Me("me", "host", 1), utcnow(), ttl)
        )
        await eventually(lambda: stepped.done() and beat.done())
        assert stepped.result() is True and me.trusted()
        assert len(running) == lanes and not any(h.done() for h in held)
        lease = await leases.get(pg_store, leader.LEASE)
        assert lease is not None and lease.holder == "me"
        await me.stand_down()  # its release goes ahead too
        assert not (await leases.get(pg_store, leader.LEASE) or lease).live(utcnow())
    finally:
        release.set()
        await asyncio.gather(*held)


async def test_a_renewal_that_hangs_is_given_up_and_trust_ends_on_time(
    pg_store: db.Store,
) -> None:
    ttl = timedelta(seconds=1.2)
    me = leader.Leadership(pg_store, "me", ttl, utcnow, workers.Registry(pg_store, utcnow))
    assert await me.step()
    release = threading.Event()

    def hanging(conn: backend.Conn) -> None:
        release.wait(WITHIN_S)  # the lease's own connection does not answer

    stuck = asyncio.ensure_future(pg_store.write_now(hanging))
    try:
        stepped = asyncio.ensure_future(me.step())
        await eventually(stepped.done)  # given up, not waited out
        await eventually(lambda: not me.trusted() and not me.leading)
        assert not stuck.done()
    finally:
        release.set()
        await stuck
    # The connection answers again: it leads again (once its old lease lapsed).
    for _ in range(int(WITHIN_S * 20)):
        if await me.step():
            break
        await asyncio.sleep(0.05)
    assert me.trusted()
    await me.stand_down()
