"""The store: units of work run on SQLite (the default) or PostgreSQL.

Use:

    store = await db.open(db.StoreConfig(data_dir=Path("data")))
    new = await store.write(seen.mark_seen_sync, "news", "feed", ["a", "b"], now)
    await store.close()

`open` returns the backend `config.database_url` asks for: without one, SQLite in the
data directory (`store.backends.sqlite_store`: one writer, group commit, a bounded WAL); with a
`postgresql://` URL, PostgreSQL (`store.backends.pg`: a few lanes, each with its own
connection). Both hand units a `backend.Conn`, and the repositories never ask which.
"""

from __future__ import annotations

from store.backends.core import CheckpointMode, CheckpointStats, Store, StoreConfig, on_commit
from store.backends.writer import foreground

__all__ = [
    "CheckpointMode",
    "CheckpointStats",
    "Store",
    "StoreConfig",
    "foreground",
    "on_commit",
    "open",
]


async def open(config: StoreConfig, *, readonly: bool = False) -> Store:
    """The backend the config asks for, open, migrated (unless read-only)."""
    if config.database_url:
        # Imported here so psycopg loads only when PostgreSQL is asked for.
        from store.backends.pg import PgStore

        return await PgStore.open_backend(config, readonly=readonly)
    from store.backends.sqlite_store import SqliteStore

    return await SqliteStore.open_backend(config, readonly=readonly)
