"""When a schedule's slots fall: local wall-clock slots as UTC instants, DST-correct.

Pure: instants come in as parameters (aware, any zone; answers are UTC) and nothing
reads the clock.

    week = times.between(schedule, monday, monday + timedelta(days=7))   # [start, end)
    soon = times.upcoming(schedule, now, 3)            # the next three, from now on
    today = times.on(schedule, local_date)             # "slot 2 of 3 today"
    when = times.fire_at(schedule, slot, now, last_fired)   # None: past its grace
    plan = times.catch_up(schedule, missed, now, last_fired)  # after downtime

Local time is the schedule's zone (zoneinfo), and `days` are local days. A slot in a
skipped hour (spring forward: 02:30 on a day the clocks jump from 02:00 to 03:00) fires
at the first instant after the jump (03:00 local); a slot in a repeated hour (fall
back) is one slot, at the hour's first occurrence.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from pipelines.config import schedules

Schedule = schedules.Schedule
_DAY = timedelta(days=1)


@dataclass(frozen=True)
class Slot:
    """One slot of a schedule: when it fires, and the local day and time it is written as
    (02:30 on a spring-forward day fires at 03:00 local, and is still the 02:30 slot)."""

    #: When it fires (UTC).
    at: datetime
    #: The local date it belongs to.
    day: date
    #: The local time as the schedule lists it.
    time: time


@dataclass(frozen=True)
class CatchUp:
    """After downtime: the one missed slot that still fires, and when; the rest expire."""

    fire: Slot | None
    fire_at: datetime | None
    expired: tuple[Slot, ...]


def instant(zone: ZoneInfo, day: date, wall: time) -> datetime:
    """The UTC instant of local `wall` on `day`: the first occurrence of a repeated time,
    the end of the jump for a skipped one."""
    naive = datetime.combine(day, wall)
    first = naive.replace(tzinfo=zone).astimezone(UTC)  # fold=0: a repeated time's first
    if first.astimezone(zone).replace(tzinfo=None) == naive:
        return first
    return _jump_end(naive, zone)


def _jump_end(naive: datetime, zone: ZoneInfo) -> datetime:
    """The instant the clocks jumped over `naive` (a wall time that never happened).

    Read with the offset after the jump, `naive` falls before it; with the offset before,
    after it (PEP 495: fold picks the offset). The jump lies between: halve to the second."""
    lo = int(naive.replace(tzinfo=zone, fold=1).timestamp())
    hi = int(naive.replace(tzinfo=zone, fold=0).timestamp())
    before = _offset(lo, zone)
    while hi - lo > 1:
        middle = (lo + hi) // 2
        lo, hi = (middle, hi) if _offset(middle, zone) == before else (lo, middle)
    return datetime.fromtimestamp(hi, UTC)


def _offset(timestamp: int, zone: ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(timestamp, zone).utcoffset()


def on(schedule: Schedule, day: date) -> list[Slot]:
    """The slots of local `day` in order (none on a day the schedule has off)."""
    if day.weekday() not in schedule.days:
        return []
    return [Slot(instant(schedule.zone, day, wall), day, wall) for wall in schedule.slots]


def between(schedule: Schedule, start: datetime, end: datetime) -> list[Slot]:
    """The slots firing from `start` (included) to `end` (excluded), in order."""
    end = _utc(end, "end")
    return list(itertools.takewhile(lambda slot: slot.at < end, _from(schedule, start)))


def upcoming(schedule: Schedule, now: datetime, count: int) -> list[Slot]:
    """The next `count` slots firing at `now` or later, in order."""
    return list(itertools.islice(_from(schedule, now), max(count, 0)))


def _from(schedule: Schedule, start: datetime) -> Iterator[Slot]:
    """Every slot firing at `start` or later, in order, without end (none for a schedule
    with no slot or no day). Local days run in order, and so do their instants."""
    start = _utc(start, "start")
    if not schedule.slots or not schedule.days:
        return
    # The day before too: a zone's offset may put yesterday's late slot after `start`.
    day = start.astimezone(schedule.zone).date() - _DAY
    while True:
        yield from (slot for slot in on(schedule, day) if slot.at >= start)
        day += _DAY


def fire_at(
    schedule: Schedule, slot: Slot, now: datetime, last_fired: datetime | None
) -> datetime | None:
    """When `slot` fires: its time, or later when the schedule's last post was under
    min_gap ago, and never before `now`; None when that is past its grace (it expires)."""
    now = _utc(now, "now")
    earliest = max(slot.at, now)
    if last_fired is not None:
        earliest = max(earliest, _utc(last_fired, "last_fired") + schedule.min_gap)
    return earliest if earliest <= slot.at + schedule.grace else None


def catch_up(
    schedule: Schedule, missed: Iterable[Slot], now: datetime, last_fired: datetime | None
) -> CatchUp:
    """After downtime, never a burst: of the slots that passed unfired, the oldest that may
    still fire (`fire_at`) fires once; every other one expires."""
    now = _utc(now, "now")
    ordered = sorted(missed, key=lambda slot: (slot.at, slot.day, slot.time))
    if any(slot.at > now for slot in ordered):
        raise ValueError("catch_up takes slots that have passed: a slot after now is not missed")
    for slot in ordered:
        when = fire_at(schedule, slot, now, last_fired)
        if when is not None:
            return CatchUp(slot, when, tuple(other for other in ordered if other is not slot))
    return CatchUp(None, None, tuple(ordered))


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {moment.isoformat()}")
    return moment.astimezone(UTC)
