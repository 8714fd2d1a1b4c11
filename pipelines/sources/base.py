"""What every source returns, and the errors a source may raise.

A source is one async function per type, `fetch(config, state, client) -> Fetched`:
it does I/O only, never touches the store, and takes and returns its own small
`state` (a dict of strings such as an ETag) that the engine persists between runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class FetchedItem:
    """One item as a source saw it; `source_id` is what dedup keys on."""

    source_id: str
    title: str
    text: str
    link: str | None = None
    published: datetime | None = None
    #: The item's image as an http(s) URL (sources.images.checked), or None.
    image_url: str | None = None
    #: Everything a replay or a dispatcher (e.g. an SMTP reply) needs; JSON-serialisable.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fetched:
    """A source's answer for one run: its items and the state to keep for next time."""

    items: list[FetchedItem]
    state: dict[str, str] = field(default_factory=dict)


class SourceError(Exception):
    """A source could not be read this run; the message says why and holds no secret."""
