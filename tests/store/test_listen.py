"""Rows one worker queues wake another worker's waiters through PostgreSQL's NOTIFY,
sent in the enqueuing unit: at its commit, never on rollback."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest

from store import backend, db, listen, outbox
from tests import pg_databases

#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 30.0


@pytest.fixture
async def two_workers(tmp_path: Path) -> AsyncIterator[tuple[db.Store, db.Store]]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_pgscale_listen_{os.getpid()}"
    server.drop(name)
    url = server.create(name)
    a = await db.Store.open(db.StoreConfig(data_dir=tmp_path / "a", database_url=url))
    b = await db.Store.open(db.StoreConfig(data_dir=tmp_path / "b", database_url=url))
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()
        server.drop(name)


class Rollback(Exception):
    """the unit gives up after queueing"""


async def test_a_commit_elsewhere_wakes_this_workers_waiters_and_a_rollback_does_not(
    two_workers: tuple[db.Store, db.Store], now: datetime
) -> None:
    a, b = two_workers
    dispatch, alert = outbox.wakeup(b, ["dispatch"]), outbox.wakeup(b, ["alert"])
    stop = asyncio.Event()
    listener = asyncio.create_task(listen.run(b, stop))
    try:
        await asyncio.sleep(1.0)  # the thread is listening before anything commits

        def queued_then_gave_up(conn: backend.Conn) -> None:
            outbox.enqueue_sync(conn, "dispatch", "news", {}, now)
            raise Rollback

        with pytest.raises(Rollback):
            await a.write(queued_then_gave_up)
        await outbox.enqueue(a, "alert", outbox.ALERTS, {"text": "x"}, now)
        # Notifications arrive in commit order: once the alert's has, a dispatch one
        # from the rolled-back unit would have too.
        await asyncio.wait_for(alert.wait(), WITHIN_S)
        assert not dispatch.is_set()

        await outbox.enqueue(a, "dispatch", "news", {}, now)
        await asyncio.wait_for(dispatch.wait(), WITHIN_S)
    finally:
        stop.set()
        await listener


async def test_the_listener_runs_until_stopped(store: db.Store) -> None:
    stop = asyncio.Event()
    listener = asyncio.create_task(listen.run(store, stop))
    await asyncio.sleep(0.05)
    assert not listener.done()
    stop.set()
    await listener
