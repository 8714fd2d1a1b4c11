"""The store's summary for operators, on either backend."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from store import db, items
from store.backends import migrate, pg
from store.reports import info


async def test_the_summary_counts_rows_and_names_the_store(store: db.Store, now: datetime) -> None:
    for n in range(3):
        await store.write(items.create_sync, "news", "feed", f"guid-{n}", {"n": n}, now)
    summary = await info.info(store)
    assert summary.schema_version == migrate.discover()[-1].version
    assert (summary.rows["items"], summary.rows["events"], summary.rows["claims"]) == (3, 3, 0)
    assert summary.db_bytes > 0 and summary.free_bytes >= 0
    assert summary.path == store.location


async def test_a_postgres_store_is_named_without_its_password(tmp_path: Path) -> None:
    url = "postgresql://gatehouse:hunter2@db.internal:6432/gh"
    store = pg.PgStore(db.StoreConfig(data_dir=tmp_path, database_url=url), readonly=True)
    try:
        assert store.location == "postgresql://db.internal:6432/gh"
    finally:
        await store.close()
