"""Numbered schema migrations: `store/sql/migrations/NNNN_name.sql`, applied in order.

Each migration and its bookkeeping row commit in one transaction, so a failed
migration leaves the database exactly as it was. The migrations are the schema's
only source: `docs/schema/sqlite.sql` and `postgres.sql` are generated from them
(`python3 dev.py schema`, see store.backends.generate), and a test fails when either is not
current.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from store import errors, sql

MIGRATIONS_DIR = sql.SQL_DIR / "migrations"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
)"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Every migration file, in order; gaps or stray files are an error."""
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise errors.MigrationError(f"{path.name}: migration files are named NNNN_name.sql")
        found.append(Migration(int(match.group(1)), match.group(2), path))
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise errors.MigrationError(
                f"migration {expected:04d} is missing before {migration.path.name}"
            )
    return found


def applied_versions(conn: sqlite3.Connection) -> set[int]:
    conn.execute(BOOKKEEPING)
    return {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}


def apply_pending(conn: sqlite3.Connection, directory: Path = MIGRATIONS_DIR) -> list[int]:
    """Apply each missing migration in its own BEGIN IMMEDIATE transaction."""
    migrations = discover(directory)
    done = applied_versions(conn)
    newest_known = migrations[-1].version if migrations else 0
    if done and max(done) > newest_known:
        raise errors.MigrationError(
            f"the database is at schema version {max(done)}, newer than this gatehouse "
            f"knows ({newest_known}); upgrade gatehouse instead"
        )
    applied = []
    for migration in migrations:
        if migration.version in done:
            continue
        _apply_one(conn, migration)
        applied.append(migration.version)
    return applied


def _apply_one(conn: sqlite3.Connection, migration: Migration) -> None:
    script = migration.path.read_text(encoding="utf-8")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in sql.statements(script):
            conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
            # Wall-clock bookkeeping only; nothing reads it back into logic.
            (migration.version, migration.name, int(time.time() * 1000)),
        )
        conn.execute("COMMIT")
    except BaseException as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error | ValueError):
            raise errors.MigrationError(f"migration {migration.path.name} failed: {exc}") from exc
        raise
