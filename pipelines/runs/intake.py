"""What a fetch brings in: source ids cleaned for storage, deduplicated, and recorded as
new items, one chunk per transaction (the engine and the trigger endpoint share it). An
entry the pipeline's filter drops is recorded all the same and ends `filtered` in the same
transaction, its event naming the rule: never drafted, never charged, and /replay brings
it back past the filter (only intake filters).

    fetched = intake.storable(await sources.fetch(source, state, client))
    created, problems = await intake.record(store, pipeline, scope, fetched, now)
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime

from pipelines.config import filters, spec
from pipelines.sources import base
from store import backend, errors, items
from store.backends import text as store_text
from store.backends.core import Store
from store.intake import seen, timetable
from store.items import Item
from store.items.machine import State

log = logging.getLogger(__name__)

#: Items recorded, or moved to drafting, per write transaction. One chunk holds the
#: writer for a few milliseconds, so a tap's write (which goes ahead of the tick's queued
#: ones) never waits much longer; the extra commits cost one fsync per chunk.
RECORD_CHUNK = 100


def _payload(fetched: base.FetchedItem) -> dict[str, object]:
    payload: dict[str, object] = {
        "title": fetched.title,
        "text": fetched.text,
        "link": fetched.link,
        "published": fetched.published.isoformat() if fetched.published else None,
        "extra": fetched.extra,
    }
    if fetched.image_url:  # only when there is one: older items' hashes stay as they were
        payload["image_url"] = fetched.image_url
    return payload


def storable(fetched: base.Fetched) -> base.Fetched:
    """Source ids the store can hold (a JSON escape may carry a lone surrogate or a NUL):
    cleaned here, before dedup keys on them; the rest of the payload is cleaned as it is
    stored."""
    if all(store_text.unstorable(item.source_id) is None for item in fetched.items):
        return fetched
    cleaned = [
        dataclasses.replace(item, source_id=store_text.clean(item.source_id))
        for item in fetched.items
    ]
    return dataclasses.replace(fetched, items=cleaned)


def record_sync(
    conn: backend.Conn,
    pipeline: spec.Pipeline,
    scope: str,
    chunk: list[base.FetchedItem],
    source_state: dict[str, str] | None,
    now: datetime,
    *,
    dedup: bool,
) -> list[Item]:
    """One chunk of a fetched batch; the source's state is saved only when given."""
    ids = [item.source_id for item in chunk]
    keep = set(ids)
    if dedup and pipeline.dedup.mark_at == "fetch":
        # Marked the moment fetch returns (the default): a duplicate card costs more than
        # a dropped item, and a dropped item can be replayed.
        keep = set(seen.mark_seen_sync(conn, pipeline.name, scope, ids, now))
    elif dedup:  # mark_at success: marked when its draft reaches approval (engine.py)
        keep = set(seen.filter_unseen_sync(conn, pipeline.name, scope, ids))
    payloads: dict[str, dict[str, object]] = {}
    for fetched in chunk:
        if fetched.source_id not in keep:
            continue
        keep.discard(fetched.source_id)  # the first of repeated ids wins
        payloads[fetched.source_id] = _payload(fetched)
    new = items.create_many_sync(conn, pipeline.name, scope, payloads, now)
    created = [_filtered(conn, pipeline, item, payloads[item.source_id], now) for item in new]
    if source_state is not None:
        timetable.save_source_state_sync(conn, pipeline.name, scope, source_state, now)
    return created


def _filtered(
    conn: backend.Conn,
    pipeline: spec.Pipeline,
    item: Item,
    payload: dict[str, object],
    now: datetime,
) -> Item:
    """The new item, or the item moved to filtered when the pipeline's filter drops it."""
    verdict = filters.verdict(pipeline.filter, payload)
    if not verdict.dropped:
        return item
    dropped = items.Move(item, State.FILTERED, "system", now, verdict.reason, any_version=True)
    return items.apply_one(conn, dropped)


async def record(
    store: Store,
    pipeline: spec.Pipeline,
    scope: str,
    result: base.Fetched,
    now: datetime,
) -> tuple[list[Item], list[str]]:
    """Dedup the batch and create an item row for each new id, RECORD_CHUNK at a time:
    the items created, and what went wrong (for the run's errors).

    Each chunk's dedup marks and item rows commit together, and the source's saved
    state (its ETag) commits only with the last chunk: a crash can neither lose items
    behind a 304 nor mark ids whose rows were never written. After a crash between
    chunks the next fetch sees the whole batch again, and dedup skips what was kept.
    Chunks keep each transaction short, so an operator's tap never waits long behind
    a large batch.
    """
    created: list[Item] = []
    problems: list[str] = []
    dedup = True
    batch = result.items
    for first in range(0, max(len(batch), 1), RECORD_CHUNK):
        chunk = batch[first : first + RECORD_CHUNK]
        state = result.state if first + RECORD_CHUNK >= len(batch) else None
        try:
            created += await store.write(
                record_sync, pipeline, scope, chunk, state, now, dedup=dedup
            )
        except errors.StoreError as exc:
            if not dedup:
                raise
            if pipeline.dedup.fail_closed:
                problems.append(
                    f"source {scope}: dedup unavailable ({exc}); batch skipped (fail_closed)"
                )
                return created, problems
            # Degrade open: items already recorded stay unique in `items`.
            log.warning(
                "pipeline %s: dedup unavailable, processing the batch unfiltered: %s",
                pipeline.name, exc,
            )  # fmt: skip
            problems.append(
                f"source {scope}: dedup unavailable ({exc}); processed the batch unfiltered"
            )
            dedup = False
            created += await store.write(
                record_sync, pipeline, scope, chunk, state, now, dedup=dedup
            )
    return created, problems
