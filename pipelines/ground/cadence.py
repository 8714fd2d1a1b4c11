"""When a pipeline runs: parse schedules and intervals, compute the next run, decide what is due.

Everything here is pure: time comes in as a parameter, randomness as an optional `rng`.

    sched = parse_schedule("*/15 * * * *")       # or "5m", "1h30m", "manual"
    due = next_run(sched, previous=now, jitter=parse_interval("30s"))
    decision = due_action(sched, next_due_at=due, now=later, misfire_window=timedelta(hours=1))
    if decision.action is Action.RUN: ...        # then store decision.next_due_at
"""

from __future__ import annotations

import enum
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

ZERO = timedelta(0)

VALID_SCHEDULES = "an interval like 5m or 1h, a 5-field cron expression, or manual"
VALID_INTERVALS = "a number with a unit s, m, h or d, like 30s, 5m, 1h, 2d or 1h30m"

# Units in descending order, each at most once: "1d2h30m15s".
_INTERVAL_RE = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule: every `interval`, at each `cron` slot (UTC), or only by hand."""

    kind: Literal["interval", "cron", "manual"]
    #: The text the operator wrote, kept for display and round-trips.
    text: str
    interval: timedelta | None = None
    cron: str | None = None

    def __str__(self) -> str:
        return self.text


class Action(enum.StrEnum):
    """What the scheduler should do with a pipeline right now."""

    WAIT = "wait"  #: not due yet (or manual): leave it alone
    RUN = "run"  #: due, possibly late but within the misfire window: run once
    SKIP_MISSED = "skip_missed"  #: overdue beyond the misfire window: skip, reschedule


@dataclass(frozen=True)
class Decision:
    """The action, and the due time to store after taking it (None: manual)."""

    action: Action
    next_due_at: datetime | None


def parse_interval(text: str) -> timedelta:
    """Parse "30s", "5m", "1h", "2d" or combinations like "1h30m"; "0s" is allowed."""
    cleaned = text.strip().lower() if isinstance(text, str) else ""
    match = _INTERVAL_RE.fullmatch(cleaned)
    if not cleaned or match is None:
        raise ValueError(f"invalid interval {text!r}: expected {VALID_INTERVALS}")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def parse_schedule(text: str) -> Schedule:
    """Parse a schedule string; ValueError names the valid forms."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"invalid schedule {text!r}: expected {VALID_SCHEDULES}")
    cleaned = " ".join(text.split())
    if cleaned.lower() == "manual":
        return Schedule(kind="manual", text="manual")
    if len(cleaned.split(" ")) == 5:
        from croniter import croniter  # only cron lines need it

        if not croniter.is_valid(cleaned):
            raise ValueError(
                f"invalid cron expression {cleaned!r}: a field is out of range or malformed;"
                f" expected {VALID_SCHEDULES}"
            )
        return Schedule(kind="cron", text=cleaned, cron=cleaned)
    try:
        every = parse_interval(cleaned)
    except ValueError:
        raise ValueError(f"invalid schedule {text!r}: expected {VALID_SCHEDULES}") from None
    if every <= ZERO:
        raise ValueError(f"invalid schedule {text!r}: an interval must be longer than 0s")
    return Schedule(kind="interval", text=cleaned, interval=every)


def next_run(
    schedule: Schedule,
    previous: datetime,
    *,
    jitter: timedelta = ZERO,
    rng: random.Random | None = None,
) -> datetime | None:
    """The first run strictly after `previous`, plus a random delay in [0, jitter]; UTC.

    Manual schedules never run on their own: None.
    """
    start = _utc(previous, "previous")
    if schedule.kind == "manual":
        return None
    if schedule.kind == "interval":
        assert schedule.interval is not None
        base = start + schedule.interval
    else:
        assert schedule.cron is not None
        from croniter import croniter

        base = croniter(schedule.cron, start).get_next(datetime).astimezone(UTC)
    return base + _jitter(jitter, rng)


def first_due(
    schedule: Schedule,
    now: datetime,
    *,
    jitter: timedelta = ZERO,
    rng: random.Random | None = None,
) -> datetime | None:
    """When a pipeline that has never been scheduled is first due.

    An interval pipeline starts right away (an operator who adds "every 5m" expects a
    first run now); a cron pipeline waits for its next slot; manual is never due.
    """
    start = _utc(now, "now")
    if schedule.kind == "interval":
        return start + _jitter(jitter, rng)
    return next_run(schedule, start, jitter=jitter, rng=rng)


def due_action(
    schedule: Schedule,
    next_due_at: datetime | None,
    now: datetime,
    misfire_window: timedelta,
    *,
    jitter: timedelta = ZERO,
    rng: random.Random | None = None,
) -> Decision:
    """Decide whether a pipeline due at `next_due_at` should run at `now`.

    After downtime, every missed slot collapses into at most ONE run: if the oldest
    missed due time is within `misfire_window` the pipeline runs once, otherwise the
    run is skipped (a stale run is worse than none). Either way the next due time is
    computed from `now`, so the missed slots are never replayed one by one.
    A `next_due_at` of None (never scheduled) waits: the caller seeds it with first_due.
    """
    current = _utc(now, "now")
    if schedule.kind == "manual" or next_due_at is None:
        return Decision(Action.WAIT, None if schedule.kind == "manual" else next_due_at)
    due = _utc(next_due_at, "next_due_at")
    if current < due:
        return Decision(Action.WAIT, due)
    following = next_run(schedule, current, jitter=jitter, rng=rng)
    if current - due <= misfire_window:
        return Decision(Action.RUN, following)
    return Decision(Action.SKIP_MISSED, following)


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime (UTC), got naive {moment.isoformat()}")
    return moment.astimezone(UTC)


def _jitter(jitter: timedelta, rng: random.Random | None) -> timedelta:
    if jitter < ZERO:
        raise ValueError(f"jitter must not be negative, got {jitter}")
    if jitter == ZERO:
        return ZERO
    # Whole microseconds keep results exact and comparable.
    micros = (rng or random.Random()).randint(0, jitter // timedelta(microseconds=1))
    return timedelta(microseconds=micros)
