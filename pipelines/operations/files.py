"""Reconciling file dispatch folders with the store: orphans, ghosts, backfill, prune."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines import dispatch
from pipelines.config import spec
from pipelines.dispatch import file as dispatch_file
from store import drafts, items, outbox, payloads
from store.db import Store


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

    @classmethod
    def from_plain(cls, found: dict[str, Any]) -> FolderReport:
        """A report as `plain` sent it (the running bot's answer to reconcile)."""
        orphans = [dispatch_file.OrphanFile(**orphan) for orphan in found["orphans"]]
        return cls(**{**found, "folder": Path(found["folder"]), "orphans": orphans})


@dataclass(frozen=True)
class _Row:
    pipeline: str
    item_id: int
    attempt: int
    version: int
    sent: bool


def _dispatch_row(row: outbox.Row) -> _Row:
    job = payloads.Dispatch.of(row)
    return _Row(row.target, job.item_id, job.attempt, job.version, row.state == "sent")


def _folders(pipelines: Mapping[str, spec.Pipeline]) -> dict[Path, list[str]]:
    folders: dict[Path, list[str]] = {}
    for name, pipeline in sorted(pipelines.items()):
        if isinstance(pipeline.dispatch, dispatch.FileTarget):
            folders.setdefault(pipeline.dispatch.path.absolute(), []).append(name)
    return folders


async def reconcile(
    store: Store,
    pipelines: Mapping[str, spec.Pipeline],
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
    rows = [_dispatch_row(row) for row in await outbox.dispatches(store)]
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
    delivery = dispatch.Delivery.of(item, draft, row.attempt)
    data = dispatch_file.render(delivery).encode()
    await asyncio.to_thread(dispatch_file.write_atomic, path, data)
