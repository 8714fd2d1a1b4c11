"""Long operator chores on the store: an online backup and file-target reconciliation.

    result = await maintenance.backup(store, Path("/backups/gh-2026-05-01.db"), progress=cb)
    reports = await maintenance.reconcile(store, pipelines, backfill=True, progress=cb)

Both only read the store (on its query_only connections), so they run beside the bot.
The backup goes through SQLite's backup API inside one read transaction: it copies one
snapshot however busy the writer is, and never copies a live file by hand.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pipelines import config, dispatch
from pipelines import operations as views
from pipelines.dispatch import file as dispatch_file
from store import backend, drafts, items
from store.db import Store

#: Pages copied per backup step; between steps the progress callback reports.
BACKUP_PAGES_PER_STEP = 256

#: (pages copied, pages in all)
BackupProgress = Callable[[int, int], None]


class BackupFailed(Exception):
    """The backup did not verify; the partial file was removed."""


@dataclass(frozen=True)
class BackupResult:
    path: Path
    pages: int
    size_bytes: int
    #: Row counts per table, equal in the snapshot copied and in the backup file.
    rows: dict[str, int]
    integrity: str


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
        raise views.Invalid(f"{path} already exists; a backup never overwrites: choose a new path")
    if not path.parent.is_dir():
        raise views.Invalid(f"{path.parent} is not a directory; create it first")
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


async def backup(store: Store, path: Path, progress: BackupProgress | None = None) -> BackupResult:
    """Copy the store to a new file at `path`, then check the copy (integrity, row counts)."""
    if store.dialect != "sqlite":
        raise BackupFailed(
            "this store lives in PostgreSQL: back it up with pg_dump (see the README)"
        )
    return await store.read(lambda conn: _backup_sync(conn, path.absolute(), progress))


def _backup_sync(conn: backend.Conn, path: Path, progress: BackupProgress | None) -> BackupResult:
    assert isinstance(conn, sqlite3.Connection), "backup() checked the dialect"
    _create_new(path)
    try:
        return _copy(conn, path, progress)
    except BaseException:
        path.unlink(missing_ok=True)  # only the file this call created
        raise


# -- reconcile file dispatch targets ------------------------------------------------------


@dataclass
class FolderReport:
    """One dispatch folder compared with the store's dispatch rows for it."""

    folder: Path
    pipelines: list[str]
    expected: int
    #: Files present that the store never dispatched there.
    orphans: list[dispatch_file.OrphanFile] = field(default_factory=list)
    #: Files the store dispatched there that are missing.
    ghosts: list[str] = field(default_factory=list)
    backfilled: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    #: Orphans without gatehouse's front matter: never pruned, someone else wrote them.
    foreign: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Row:
    pipeline: str
    item_id: int
    attempt: int
    version: int
    sent: bool


# The store has no query for "every dispatch row"; this one reads the outbox directly.
_DISPATCH_ROWS = (
    "SELECT target, payload, state FROM outbox "
    "WHERE kind = 'dispatch' AND state IN ('sent', 'pending') ORDER BY id"
)


def _dispatch_rows(conn: backend.Conn) -> list[_Row]:
    out = []
    for target, payload, state in conn.execute(_DISPATCH_ROWS):
        data = json.loads(payload)
        out.append(
            _Row(target, int(data["item_id"]), int(data["attempt"]), int(data["version"]),
                 state == "sent")
        )  # fmt: skip
    return out


def _folders(pipelines: Mapping[str, config.Pipeline]) -> dict[Path, list[str]]:
    folders: dict[Path, list[str]] = {}
    for name, pipeline in sorted(pipelines.items()):
        if isinstance(pipeline.dispatch, dispatch.FileTarget):
            folders.setdefault(pipeline.dispatch.path.absolute(), []).append(name)
    return folders


async def reconcile(
    store: Store,
    pipelines: Mapping[str, config.Pipeline],
    *,
    backfill: bool = False,
    prune: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[FolderReport]:
    """Compare each file dispatch folder with the store; optionally rewrite or remove files.

    backfill rewrites a missing file from its approved draft (same name and content as
    the original delivery); prune deletes orphans written by gatehouse (front matter with
    its idempotency key) and leaves every other file alone.
    """
    rows = await store.read(_dispatch_rows)
    reports = []
    for folder, names in _folders(pipelines).items():
        mine = [row for row in rows if row.pipeline in names]
        expected = {_name(r): r for r in mine if r.sent}
        in_flight = {_name(r) for r in mine if not r.sent}
        found = dispatch_file.reconcile_files(folder, {n: r.item_id for n, r in expected.items()})
        report = FolderReport(folder, names, len(expected), ghosts=list(found.ghosts))
        report.orphans = [o for o in found.orphans if o.name not in in_flight]
        if progress:
            progress(f"{folder}: {len(report.orphans)} orphans, {len(report.ghosts)} ghosts")
        if backfill:
            for name in report.ghosts:
                await _backfill(store, folder / name, expected[name])
                report.backfilled.append(name)
                if progress:
                    progress(f"backfilled {folder / name}")
        for orphan in report.orphans:
            if not (orphan.idempotency_key or "").startswith("gh-"):
                report.foreign.append(orphan.name)
            elif prune:
                (folder / orphan.name).unlink(missing_ok=True)
                report.pruned.append(orphan.name)
                if progress:
                    progress(f"pruned {folder / orphan.name}")
        reports.append(report)
    return reports


def _name(row: _Row) -> str:
    return dispatch_file.file_name(row.pipeline, row.item_id, row.version)


async def _backfill(store: Store, path: Path, row: _Row) -> None:
    item = await items.get(store, row.item_id)
    draft = await drafts.get(store, row.item_id, row.version)
    delivery = dispatch.Delivery.build(
        item_id=row.item_id,
        pipeline=row.pipeline,
        version=row.version,
        attempt=row.attempt,
        text=draft.text,
        title=str(item.payload.get("title", "")),
        link=item.payload.get("link"),
        source=item.payload.get("extra") or {},
    )
    data = dispatch_file.render(delivery).encode()
    await asyncio.to_thread(dispatch_file.write_atomic, path, data)
