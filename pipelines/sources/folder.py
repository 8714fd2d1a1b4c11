"""A directory of markdown notes (`*.md`, recursive), synced incrementally by content hash.

YAML: `source: {type: folder, path: /srv/notes}` (a relative path is read beside the
pipeline file). Each file is an item whose
source_id is "<relative path>@<first 16 hex of its sha256>": an unchanged file
repeats its id and dedups away downstream, a changed file becomes a new item.
An optional YAML front matter block (--- ... ---) lands in `extra["front_matter"]`.
A leading `# Heading` is the item's title (else the file name), and is not repeated
in its text; the rest of the markdown becomes plain text (`text.markdown`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import ConfigDict, Field, field_validator, model_validator

from pipelines.ground import paths
from pipelines.sources import base, common
from pipelines.text import markdown

if TYPE_CHECKING:
    import httpx

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_HEADING = re.compile(r"^# +(.+?)\s*#*\s*$", re.MULTILINE)
#: A title heading that opens the note (blank lines before it allowed).
_LEADING_HEADING = re.compile(r"\A\s*# +(.+?)[ \t]*#*[ \t]*(?:\r?\n|\Z)")


class Config(common.ByteLimits):
    """The directory to read."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["folder"]
    #: Relative to the pipeline file, wherever gatehouse starts.
    path: paths.BesideFile
    #: Dedup scope; defaults to "folder:<path>".
    scope: str = ""
    #: A file-name glob matched at every depth below `path`.
    pattern: str = "*.md"
    #: Largest file read, in bytes; unset: the configured default.
    max_bytes: int | None = Field(default=None, ge=1)
    #: Unused (files are not compressed); kept so every source takes the same caps.
    max_decompressed_bytes: int | None = Field(default=None, ge=1)

    @field_validator("pattern")
    @classmethod
    def _check_pattern(cls, value: str) -> str:
        if not value or "/" in value or "\\" in value or value in (".", ".."):
            raise ValueError('must be a file-name glob such as "*.md", without directories')
        return value

    @model_validator(mode="before")
    @classmethod
    def _default_scope(cls, data: Any) -> Any:
        # From the path as written, not as resolved: the scope files what was seen, so a
        # folder read from elsewhere than before must not make every note new again.
        if isinstance(data, dict) and not data.get("scope"):
            path = data.get("path")
            if isinstance(path, str | Path):
                return {**data, "scope": f"folder:{Path(path)}"}
        return data


async def fetch(
    config: Config, state: Mapping[str, str], client: httpx.AsyncClient
) -> base.Fetched:
    """Every matching file as an item, sorted by path; the client is unused.

    No state is kept: the content hash in each source_id lets the dedup table do the
    remembering, and a per-file hash map here would only duplicate it and grow with
    the folder.
    """
    items = await asyncio.to_thread(_read_all, config.path, config.pattern, config.limits.max_bytes)
    return base.Fetched(items=items, state={})


def _read_all(root: Path, pattern: str, max_bytes: int) -> list[base.FetchedItem]:
    if not root.is_dir():
        raise base.SourceError(f"folder {root} does not exist or is not a directory")
    try:
        paths = sorted(p for p in root.rglob(pattern) if p.is_file())
        return [_read_one(root, path, max_bytes) for path in paths]
    except OSError as exc:
        raise base.SourceError(f"folder {root}: cannot read: {exc.strerror or exc}") from None


def _read_one(root: Path, path: Path, max_bytes: int) -> base.FetchedItem:
    relative = path.relative_to(root).as_posix()
    with path.open("rb") as file:
        raw = file.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise base.SourceError(
            f"folder {root}: {relative} is larger than max_bytes ({max_bytes} bytes);"
            " raise max_bytes on this source if it is expected"
        )
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise base.SourceError(f"folder {root}: {relative} is not valid UTF-8") from None
    front_matter, body = _split_front_matter(content, relative)
    title, body = _title(body, path.stem)
    extra: dict[str, Any] = {"path": relative}
    if front_matter is not None:
        extra["front_matter"] = front_matter
    return base.FetchedItem(
        source_id=f"{relative}@{hashlib.sha256(raw).hexdigest()[:16]}",
        title=title,
        text=markdown.to_plain(body),
        published=datetime.fromtimestamp(path.stat().st_mtime, tz=UTC),
        extra=extra,
    )


def _title(body: str, stem: str) -> tuple[str, str]:
    """The note's title and the body left to show: a heading that opens the note is the
    title and leaves the body (shown once); else the first `# heading`, else the name."""
    opening = _LEADING_HEADING.match(body)
    if opening:
        return markdown.to_plain(opening.group(1)), body[opening.end() :]
    heading = _HEADING.search(body)
    return (markdown.to_plain(heading.group(1)) if heading else stem), body


def _split_front_matter(content: str, relative: str) -> tuple[dict[str, Any] | None, str]:
    match = _FRONT_MATTER.match(content)
    if match is None:
        return None, content
    try:
        loaded = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise base.SourceError(f"{relative}: front matter is not valid YAML: {exc}") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise base.SourceError(
            f"{relative}: front matter must be a YAML mapping, got {type(loaded).__name__}"
        )
    # YAML dates are not JSON; extra must be JSON-serialisable, so render them as text.
    front_matter: dict[str, Any] = json.loads(json.dumps(loaded, default=str))
    return front_matter, content[match.end() :]
