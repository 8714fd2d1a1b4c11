"""Wake-ups across processes sharing one store (PostgreSQL's LISTEN/NOTIFY)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import psycopg
import pytest

from store import backend, db
from store.backends import notify, pg_conn
from tests import pg_databases

#: Plenty for a notification over loopback, even on a busy machine.
WAIT_S = 5.0


@pytest.fixture
async def two_processes(
    pg_run_database: pg_databases.Server, tmp_path: Path
) -> AsyncIterator[tuple[db.Store, db.Store]]:
    """Two stores on one database, as two gatehouse processes would have."""
    pg_run_database.empty_tables()
    config = db.StoreConfig(data_dir=tmp_path, database_url=pg_run_database.run_url, writers=1)
    first, second = await db.open(config), await db.open(config)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


def _sending(channel: str, fail: bool = False) -> Callable[[backend.Conn], None]:
    def unit(conn: backend.Conn) -> None:
        notify.send_sync(conn, channel)
        if fail:
            raise RuntimeError("rolled back")

    return unit


async def test_a_commit_wakes_the_other_process_and_a_rollback_does_not(
    two_processes: tuple[db.Store, db.Store],
) -> None:
    sender, listener = two_processes
    woken, other = listener.listen("outbox"), listener.listen("runs")
    await asyncio.sleep(2 * notify.POLL_S)  # the listener's LISTEN is in place
    with pytest.raises(RuntimeError):
        await sender.write(_sending("outbox", fail=True))
    await asyncio.sleep(4 * notify.POLL_S)
    assert not woken.is_set()
    await sender.write(_sending("outbox"))
    await asyncio.wait_for(woken.wait(), WAIT_S)
    assert not other.is_set()


async def test_a_dropped_listening_connection_comes_back_and_wakes_everyone(
    two_processes: tuple[db.Store, db.Store], pg_run_database: pg_databases.Server
) -> None:
    sender, listener = two_processes
    woken = listener.listen("outbox")
    await asyncio.sleep(2 * notify.POLL_S)
    with psycopg.connect(pg_run_database.run_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query LIKE 'LISTEN%'"
        )
    # Whatever was sent while it was away is lost: it wakes every channel once back.
    await asyncio.wait_for(woken.wait(), WAIT_S + notify.RECONNECT_S)
    woken.clear()
    await asyncio.sleep(2 * notify.POLL_S)
    await sender.write(_sending("outbox"))
    await asyncio.wait_for(woken.wait(), WAIT_S)


async def test_sending_is_harmless_where_one_process_holds_the_store(store: db.Store) -> None:
    await store.write(_sending("outbox"))
    with pytest.raises(ValueError, match="invalid channel"):
        store.listen("Outbox; DROP TABLE items")


def _sending_many(channels: list[str], fail: bool = False) -> Callable[[backend.Conn], None]:
    def unit(conn: backend.Conn) -> None:
        for channel in channels:
            notify.send_sync(conn, channel)
        if fail:
            raise RuntimeError("rolled back")

    return unit


async def test_a_transaction_notifies_each_channel_once_at_commit(
    two_processes: tuple[db.Store, db.Store],
) -> None:
    """Three rows queued on one channel send one NOTIFY, not three; a unit rolled back
    in its savepoint sends none, while the units beside it still wake their channel."""
    sender, listener = two_processes
    woken, other = listener.listen("outbox"), listener.listen("runs")
    marker = listener.listen("marker")
    await asyncio.sleep(2 * notify.POLL_S)  # the listener's LISTEN is in place
    before, by_label, trips = (
        pg_conn.statements_sent(),
        pg_conn.statements_by_label(),
        pg_conn.round_trips(),
    )
    await sender.write(_sending_many(["outbox", "outbox", "outbox"]))
    assert pg_conn.statements_sent() - before == 3  # BEGIN, one pg_notify, COMMIT
    assert pg_conn.round_trips() - trips == 1  # none of their results is read: sent at once
    sent = {k: n - by_label.get(k, 0) for k, n in pg_conn.statements_by_label().items()}
    assert {k: n for k, n in sent.items() if n} == {"BEGIN": 1, "notify.notify": 1, "COMMIT": 1}
    await asyncio.wait_for(woken.wait(), WAIT_S)
    woken.clear()
    failing = sender.write(_sending_many(["runs"], fail=True))
    outcomes = await asyncio.gather(
        failing, sender.write(_sending_many(["outbox"])), return_exceptions=True
    )
    assert isinstance(outcomes[0], RuntimeError)
    await asyncio.wait_for(woken.wait(), WAIT_S)
    # Notifications arrive in commit order: once a later one is in, "runs" would be.
    await sender.write(_sending_many(["marker"]))
    await asyncio.wait_for(marker.wait(), WAIT_S)
    assert not other.is_set()
