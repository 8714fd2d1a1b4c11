"""`gatehouse migrate-to-postgres`: an SQLite store copied into an empty PostgreSQL
database arrives whole, its audit chain intact, and the copy continues from there."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from store import db, errors, items, outbox
from store.audit import events, sealer
from store.cluster import heartbeats
from store.intake import runs
from store.items.machine import State
from store.upkeep import to_postgres
from tests import pg_databases


@pytest.fixture
def empty_database() -> Iterator[str]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_pgscale_copy_{os.getpid()}"
    server.drop(name)
    try:
        yield server.create(name)
    finally:
        server.drop(name)


async def filled(data_dir: Path, now: datetime) -> db.StoreConfig:
    cfg = db.StoreConfig(data_dir=data_dir)
    store = await db.open(cfg)
    try:
        for n in range(30):
            item = await store.write(
                items.create_sync, "news", "feed", f"g{n}", {"title": f"t{n}"}, now
            )
            assert item is not None
            await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)
            await outbox.enqueue(store, "alert", outbox.ALERTS, {"text": f"a{n}"}, now)
        run = await runs.start_run(store, "news", "schedule", now)
        await runs.finish_run(store, run, "ok", runs.Counts(fetched=30, new=30), None, now)
        await heartbeats.beat(store, heartbeats.Me("w", "h", 1), now, timedelta(seconds=6))
        await sealer.seal(store)
    finally:
        await store.close()
    return cfg


async def test_a_store_arrives_whole_with_its_chain_intact(
    data_dir: Path, empty_database: str, now: datetime
) -> None:
    cfg = await filled(data_dir, now)
    report = await to_postgres.copy(cfg, empty_database)
    assert report.rows["items"] == 30 and report.rows["outbox"] == 30
    assert report.rows["pipeline_runs"] == 1 and report.rows["workers"] == 1
    assert report.events_checked == report.rows["events"] == 60  # created, then drafting

    # The copy is a working store: ids continue after the copied ones, the chain too.
    target = await db.open(db.StoreConfig(data_dir=data_dir, database_url=empty_database))
    try:
        item = await target.write(items.create_sync, "news", "feed", "g-new", {"title": "new"}, now)
        assert item is not None and item.id == 31
        await target.write(items.transition_sync, item.id, State.DRAFTING, "system", now)
        await sealer.seal(target)
        assert (await target.read(events.verify_sync)).checked == 62
    finally:
        await target.close()


async def test_a_database_with_data_is_refused(
    data_dir: Path, empty_database: str, now: datetime
) -> None:
    cfg = await filled(data_dir, now)
    await to_postgres.copy(cfg, empty_database)
    with pytest.raises(to_postgres.TargetNotEmpty, match="copy only into an empty database"):
        await to_postgres.copy(cfg, empty_database)


async def test_no_sqlite_store_is_a_clear_error(tmp_path: Path, empty_database: str) -> None:
    cfg = db.StoreConfig(data_dir=tmp_path / "nothing")
    with pytest.raises(errors.StoreError, match="no SQLite store at"):
        await to_postgres.copy(cfg, empty_database)
