"""What a pipeline dropped before drafting: the entries its filter left out, each with the
rule that matched (from the item's reason, as its event recorded it), and today's count.

    found = await operations.filtered(store, "news")        # gatehouse filtered news
    n = await operations.filtered_today(store, "news", now)  # /status news
    n = await operations.skipped_today(store, "news", now)   # /status news

/replay brings one back as a new attempt, past the filter: only intake filters.
"""

from __future__ import annotations

from datetime import datetime, time

from pipelines.operations.inputs import Invalid
from store import items
from store.db import Store
from store.intake import dropped
from store.items.machine import State

#: Filtered entries `gatehouse filtered` lists by default, the most recent first.
FILTERED_SHOWN = 50


async def filtered(store: Store, name: str, limit: int = FILTERED_SHOWN) -> list[items.Item]:
    """The pipeline's filtered entries, the most recently filtered first."""
    if limit < 1:
        raise Invalid(f"the number of entries must be at least 1, not {limit}")
    return await dropped.recent(store, name, State.FILTERED, limit)


async def skipped(store: Store, name: str, limit: int = FILTERED_SHOWN) -> list[items.Item]:
    """The pipeline's entries its triage skipped, the most recently skipped first; each
    item's reason holds the model's score and reason."""
    if limit < 1:
        raise Invalid(f"the number of entries must be at least 1, not {limit}")
    return await dropped.recent(store, name, State.SKIPPED, limit)


async def filtered_today(store: Store, name: str, now: datetime) -> int:
    """Entries the pipeline's filter dropped since midnight UTC (budgets' day too) and not
    replayed since."""
    midnight = datetime.combine(now.date(), time(), tzinfo=now.tzinfo)
    return await dropped.count_since(store, name, State.FILTERED, midnight)


async def skipped_today(store: Store, name: str, now: datetime) -> int:
    """Entries the pipeline's triage skipped since midnight UTC and not replayed since."""
    midnight = datetime.combine(now.date(), time(), tzinfo=now.tzinfo)
    return await dropped.count_since(store, name, State.SKIPPED, midnight)
