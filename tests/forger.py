"""A raw connection to a store's database, on either backend, for tests that play
someone working behind the program's back (or a second writer it does not know of).

    with forger.raw(store, triggers=False) as conn:
        conn.execute("UPDATE events SET actor = 'operator:666' WHERE id = ?", (6,))
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator

from store import backend, db
from store.backends import pg_conn


@contextlib.contextmanager
def raw(store: db.Store, *, triggers: bool = True) -> Iterator[backend.Conn]:
    """An autocommit connection of its own; `triggers=False` switches the append-only
    triggers off for it alone, as a forger with the database's files or superuser would."""
    if store.dialect == "postgres":
        assert store.config.database_url
        conn: backend.Conn = pg_conn.connect(store.config.database_url)
        if not triggers:
            conn.execute("SET session_replication_role = replica")  # no trigger fires
    else:
        lite = sqlite3.connect(store.config.db_path, isolation_level=None)
        lite.row_factory = sqlite3.Row
        if not triggers:
            lite.execute("DROP TRIGGER events_no_update")
            lite.execute("DROP TRIGGER events_no_delete")
        conn = lite
    try:
        yield conn
    finally:
        conn.close()  # type: ignore[attr-defined]


@contextlib.contextmanager
def checks_off(store: db.Store, raw: backend.Conn) -> Iterator[None]:
    """The events table's CHECK that a row is sealed or not (both its place and its hash,
    or neither), off for one forgery on `raw`: SQLite ignores it on this connection;
    PostgreSQL drops it, then adds it back unchecked against the forged row, so the
    later tests sharing the run's database keep it."""
    if store.dialect != "postgres":
        raw.execute("PRAGMA ignore_check_constraints = ON")
        yield
        return
    raw.execute("ALTER TABLE events DROP CONSTRAINT events_sealed_check")
    try:
        yield
    finally:
        raw.execute(
            "ALTER TABLE events ADD CONSTRAINT events_sealed_check"
            " CHECK ((seq IS NULL) = (hash IS NULL)) NOT VALID"
        )
