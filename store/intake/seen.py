"""Dedup memory: which item ids each (pipeline, scope) has already fetched.

    unseen = await store.read(seen.filter_unseen_sync, "news", "feed", ids)
    new = await store.write(seen.mark_seen_sync, "news", "feed", unseen, now)

Intake marks ids inside the unit that writes their items, so both commit together.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta

from store import backend, clock, sql
from store.backends.core import Store

Q = sql.load("seen")

#: Ids per statement. The ids travel as one JSON parameter, so SQLite's variable
#: limit does not apply; the chunk bounds the statement's size and memory instead.
CHUNK = 500

#: How long a seen id is remembered by default: sources rarely resend older items.
DEFAULT_TTL = timedelta(days=90)

#: Rows deleted per sweep transaction, so a sweep never holds the writer long.
SWEEP_BATCH = 5000


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def filter_unseen_sync(
    conn: backend.Conn, pipeline: str, scope: str, ids: Sequence[str]
) -> list[str]:
    """The ids not seen before, in input order (each once), one query per chunk."""
    out: list[str] = []
    for chunk in _chunks(_unique(ids)):
        params = {"pipeline": pipeline, "scope": scope, "ids": json.dumps(list(chunk))}
        out.extend(row[0] for row in conn.execute(Q["filter_unseen"], params))
    return out


def mark_seen_sync(
    conn: backend.Conn, pipeline: str, scope: str, ids: Sequence[str], now: datetime
) -> list[str]:
    """Record ids as seen; returns those that were new, in input order."""
    at = clock.to_ms(now)
    unique = _unique(ids)
    new: set[str] = set()
    for chunk in _chunks(unique):
        params = {"pipeline": pipeline, "scope": scope, "ids": json.dumps(list(chunk)), "now": at}
        new.update(row[0] for row in conn.execute(Q["mark_seen"], params))
    return [item_id for item_id in unique if item_id in new]


def _sweep_batch(conn: backend.Conn, params: dict[str, object]) -> int:
    return conn.execute(Q["sweep_batch"], params).rowcount


async def sweep(
    store: Store,
    now: datetime,
    older_than: timedelta = DEFAULT_TTL,
    progress: Callable[[str, str, int], None] | None = None,
) -> int:
    """Delete ids seen before now - older_than, scope by scope in bounded batches."""
    before = clock.to_ms(now - older_than)
    scopes: list[tuple[str, str]] = await store.read(
        lambda conn: conn.execute(Q["scopes"]).fetchall()
    )
    total = 0
    for pipeline, scope in scopes:
        params = {"pipeline": pipeline, "scope": scope, "before": before, "batch": SWEEP_BATCH}
        while True:
            deleted = await store.write(functools.partial(_sweep_batch, params=params))
            total += deleted
            if progress:
                progress(pipeline, scope, total)
            if deleted < SWEEP_BATCH:
                break
    return total
