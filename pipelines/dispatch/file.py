"""File dispatch: each approved draft becomes `<folder>/<pipeline>-<item_id>-v<version>.md`.

Called through `pipelines.dispatch.dispatch`. The file is written atomically
(temp file in the same folder, fsync, rename, fsync the folder), so a reader
sees the old file or the new one, never half of one, and a crash leaves at
most a hidden `.tmp` file behind. The name is fixed by the delivery, so a
retry overwrites the same file with the same content.

`reconcile_files(folder, expected)` compares a folder with what the store says
was dispatched there; the CLI builds backfill and prune on top of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipelines.dispatch import base

# Errors that writing again will not fix without an operator changing something
# (EEXIST: the configured folder, or a parent, is a file).
_PERMANENT_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.ENAMETOOLONG,
    }
)
#: Front matter lives in the first lines; reading this much is always enough.
_FRONT_MATTER_LIMIT = 64 * 1024
#: The written file is meant to be read by whatever consumes the folder.
_FILE_MODE = 0o644


def file_name(pipeline: str, item_id: int, version: int) -> str:
    """The name a delivery's file gets inside the target folder."""
    return f"{base.check_pipeline_name(pipeline)}-{item_id}-v{version}.md"


def render(delivery: base.Delivery) -> str:
    """The file's content: YAML front matter, a blank line, the approved text."""
    meta = {
        "item": delivery.item_id,
        "pipeline": delivery.pipeline,
        "version": delivery.version,
        "attempt": delivery.attempt,
        "idempotency_key": delivery.idempotency_key,
        "title": delivery.title,
        "link": delivery.link,
    }
    if delivery.image_url:
        meta["image"] = delivery.image_url
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    text = delivery.text if delivery.text.endswith("\n") else delivery.text + "\n"
    return f"---\n{front}---\n\n{text}"


async def send(target: base.FileTarget, delivery: base.Delivery) -> base.DispatchResult:
    """Write the delivery's file; fsync makes this blocking, so it runs in a thread."""
    try:
        path = target.path / file_name(delivery.pipeline, delivery.item_id, delivery.version)
    except ValueError as error:
        raise base.PermanentDispatchError(f"file dispatch: {error}") from None
    try:
        await asyncio.to_thread(write_atomic, path, render(delivery).encode())
    except OSError as error:
        problem = f"file dispatch: could not write {path}: {error.strerror or error}"
        if error.errno in _PERMANENT_ERRNOS:
            raise base.PermanentDispatchError(problem) from None
        raise base.TransientDispatchError(problem) from None
    return base.DispatchResult(external_id=str(path), detail=f"wrote {path}")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that readers and crashes never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), _FILE_MODE)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable: the new directory entry must reach the disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class OrphanFile:
    """A .md file in the folder that the store does not expect; front matter fields if readable."""

    name: str
    item_id: int | None
    pipeline: str | None
    version: int | None
    idempotency_key: str | None


@dataclass(frozen=True)
class Reconciliation:
    """How a folder differs from the store: files nobody expects, and expected files missing."""

    orphans: tuple[OrphanFile, ...]
    #: Expected file names with no file, sorted.
    ghosts: tuple[str, ...]


def reconcile_files(folder: Path, expected: Mapping[str, int]) -> Reconciliation:
    """Compare `folder` with `expected` (file name -> item id, every row dispatched there).

    Pipelines that share a folder must all be in `expected`, or each sees the
    others' files as orphans. A missing folder holds no files.
    """
    present = set()
    if folder.is_dir():
        present = {
            entry.name
            for entry in folder.iterdir()
            if entry.suffix == ".md" and not entry.name.startswith(".") and entry.is_file()
        }
    orphans = tuple(_orphan(folder / name) for name in sorted(present - expected.keys()))
    ghosts = tuple(sorted(expected.keys() - present))
    return Reconciliation(orphans=orphans, ghosts=ghosts)


def _orphan(path: Path) -> OrphanFile:
    meta = read_front_matter(path)
    return OrphanFile(
        name=path.name,
        item_id=_int_or_none(meta.get("item")),
        pipeline=_str_or_none(meta.get("pipeline")),
        version=_int_or_none(meta.get("version")),
        idempotency_key=_str_or_none(meta.get("idempotency_key")),
    )


def read_front_matter(path: Path) -> dict[str, Any]:
    """The YAML front matter of a file written by `send`; {} when there is none or it is broken."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_FRONT_MATTER_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return {}
    if not head.startswith("---\n"):
        return {}
    end = head.find("\n---\n", 3)
    if end < 0:
        return {}
    try:
        meta = yaml.safe_load(head[4 : end + 1])
    except yaml.YAMLError:
        return {}
    return meta if isinstance(meta, dict) else {}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
