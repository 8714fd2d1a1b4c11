"""An online backup of the SQLite store to a new file, checked before it is trusted.

    result = await backup.backup(store, Path("/backups/gh-2026-05-01.db"), progress=cb)

It only reads (on a query_only connection), so it runs beside the bot. The copy goes
through SQLite's backup API inside one read transaction: it copies one snapshot
however busy the writer is, and never copies a live file by hand. A store in
PostgreSQL is backed up with pg_dump instead.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from store import backend, errors
from store.backends.core import Store

#: Pages copied per backup step; between steps the progress callback reports.
BACKUP_PAGES_PER_STEP = 256

#: (pages copied, pages in all)
BackupProgress = Callable[[int, int], None]


class BackupFailed(errors.StoreError):
    """The backup did not verify; the partial file was removed."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    pages: int
    size_bytes: int
    #: Row counts per table, equal in the snapshot copied and in the backup file.
    rows: dict[str, int]
    integrity: str


async def backup(store: Store, path: Path, progress: BackupProgress | None = None) -> BackupResult:
    """Copy the store to a new file at `path`, then check the copy (integrity, row counts)."""
    if store.dialect != "sqlite":
        raise errors.Refused(
            "this store lives in PostgreSQL: back it up with pg_dump "
            '(see docs/operations.md, "Backup and restore")'
        )
    return await store.read(_backup_sync, path, progress)


def _backup_sync(conn: backend.Conn, path: Path, progress: BackupProgress | None) -> BackupResult:
    assert isinstance(conn, sqlite3.Connection), "backup() checked the dialect"
    path = path.absolute()
    _create_new(path)
    try:
        return _copy(conn, path, progress)
    except BaseException:
        path.unlink(missing_ok=True)  # only the file this call created
        raise


def _table_counts(conn: sqlite3.Connection) -> dict[str, int]:
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name"
        )
    ]
    # Table names come from sqlite_master itself, never from input.
    return {name: conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0] for name in names}


def _create_new(path: Path) -> None:
    if path.exists() or path.is_symlink():
        raise errors.Conflict(
            f"{path} already exists; a backup never overwrites: choose a new path"
        )
    if not path.parent.is_dir():
        raise errors.NotFound(f"{path.parent} is not a directory; create it first")
    # O_EXCL: a file that appears between the check and here is refused, not replaced.
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _copy(source: sqlite3.Connection, path: Path, progress: BackupProgress | None) -> BackupResult:
    target = sqlite3.connect(path, isolation_level=None)
    try:
        # One read transaction: every step copies the same snapshot, so the writer's
        # commits meanwhile neither restart the copy nor mix into it.
        source.execute("BEGIN")
        try:
            rows = _table_counts(source)
            pages = 0

            def step(status: int, remaining: int, total: int) -> None:
                nonlocal pages
                pages = total
                if progress is not None:
                    progress(total - remaining, total)

            source.backup(target, pages=BACKUP_PAGES_PER_STEP, progress=step)
        finally:
            source.execute("COMMIT")
        # A backup is one self-contained file; the bot turns WAL back on when it opens it.
        target.execute("PRAGMA journal_mode=DELETE")
        integrity = str(target.execute("PRAGMA integrity_check").fetchone()[0])
        copied = _table_counts(target)
    finally:
        target.close()
    if integrity != "ok" or copied != rows:
        raise BackupFailed(
            f"the backup at {path} did not verify (integrity: {integrity}); it was removed"
        )
    return BackupResult(path, pages, path.stat().st_size, rows, integrity)
