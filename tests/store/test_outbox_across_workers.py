"""A row one worker queues wakes another worker's outbox waiters (PostgreSQL's NOTIFY,
sent in the enqueuing unit): at its commit, never on rollback."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest

from store import backend, db, outbox
from store.backends import notify
from tests import pg_databases

#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 30.0


@pytest.fixture
async def two_workers(tmp_path: Path) -> AsyncIterator[tuple[db.Store, db.Store]]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_pgscale_wake_{os.getpid()}"
    server.drop(name)
    url = server.create(name)
    a = await db.open(db.StoreConfig(data_dir=tmp_path / "a", database_url=url))
    b = await db.open(db.StoreConfig(data_dir=tmp_path / "b", database_url=url))
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
    woken = outbox.wakeup(b, ["dispatch"])
    await asyncio.sleep(4 * notify.POLL_S)  # b's listener is LISTENing

    def queued_then_gave_up(conn: backend.Conn) -> None:
        outbox.enqueue_sync(conn, "dispatch", "news", {}, now)
        raise Rollback

    with pytest.raises(Rollback):
        await a.write(queued_then_gave_up)
    await asyncio.sleep(8 * notify.POLL_S)
    assert not woken.is_set()

    await outbox.enqueue(a, "dispatch", "news", {}, now)
    await asyncio.wait_for(woken.wait(), WITHIN_S)
