"""The editor's numbers over the last 7 or 30 days, per pipeline (/stats, gatehouse stats).

found = await operations.stats(store, ["news"], 7, now)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from pipelines.operations.inputs import Invalid
from store.db import Store
from store.reports import stats as store_stats

#: The windows an editor steers by, in days.
WINDOWS = (7, 30)

Stats = store_stats.Stats


def window(text: str) -> int:
    """`7`, `7d`, `30` or `30d` as days; anything else is refused naming what is valid."""
    days = text.strip().lower().removesuffix("d")
    if not days.isdigit() or int(days) not in WINDOWS:
        raise Invalid(f"unknown window {text!r}: use 7d or 30d")
    return int(days)


async def stats(store: Store, names: Sequence[str], days: int, now: datetime) -> list[Stats]:
    """Each pipeline's numbers over the `days` before `now`."""
    if days not in WINDOWS:
        raise Invalid(f"unknown window {days} days: use 7 or 30")
    since = now - timedelta(days=days)
    return [await store_stats.pipeline(store, name, since, now) for name in names]
