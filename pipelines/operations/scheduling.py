"""Running, pausing and resuming pipelines, and sweeping old seen ids."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

from pipelines.operations.inputs import Invalid, check_pipeline
from store.db import Store
from store.intake import seen, timetable

if TYPE_CHECKING:  # the CLI reads operations without loading the engine
    from pipelines.service.scheduler import Scheduler

ScheduleAction = Literal["run", "pause", "resume"]
SCHEDULE_ACTIONS: tuple[ScheduleAction, ...] = ("run", "pause", "resume")

#: The longest `sweep --days` (a century): further back than any seen id can be.
MAX_SWEEP_DAYS = 36_500


@dataclass(frozen=True)
class Scheduling:
    """An operator's run / pause / resume of one pipeline; `actor` names them in the events."""

    action: str
    pipeline: str
    actor: str


async def schedule(
    store: Store,
    known: Collection[str],
    asked: Scheduling,
    now: datetime,
    *,
    scheduler: Scheduler | None = None,
) -> bool:
    """run / pause / resume a pipeline; False when pause or resume changed nothing."""
    action, name, actor = asked.action, asked.pipeline, asked.actor
    check_pipeline(name, known)
    if action == "run":
        if scheduler is not None:
            await scheduler.trigger(name, now)
        else:
            await timetable.request_run(store, name, now)
        return True
    if action not in ("pause", "resume"):
        raise Invalid(f"unknown action {action!r}; valid: {', '.join(SCHEDULE_ACTIONS)}")
    paused = action == "pause"
    if scheduler is not None:
        act = scheduler.pause if paused else scheduler.resume
        return await act(name, actor, now)
    return await timetable.set_paused(store, name, paused, actor, now)


async def sweep(
    store: Store,
    now: datetime,
    days: int = seen.DEFAULT_TTL.days,
    progress: Callable[[str, str, int], None] | None = None,
) -> int:
    """Forget seen ids older than `days` (bounded batches); returns how many were deleted."""
    if not 1 <= days <= MAX_SWEEP_DAYS:
        raise Invalid(f"--days must be from 1 to {MAX_SWEEP_DAYS}, not {days}")
    return await seen.sweep(store, now, timedelta(days=days), progress=progress)
