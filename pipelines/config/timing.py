"""The durations and schedules a pipeline file writes, as pydantic field types.

    jitter: Interval = timedelta(0)          # "30s", "5m", "1h", "2d" or "1h30m"
    schedule: ScheduleField                  # "15m", "*/15 * * * *" or "manual"

The parsing itself is pipelines.ground.cadence; this module only turns its answers into
validation errors and writes a value back out the way a file spells it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import PlainSerializer, PlainValidator

from pipelines.ground import cadence


def _interval(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f"invalid interval {value!r}: expected {cadence.VALID_INTERVALS}")
    return cadence.parse_interval(value)


def _schedule(value: object) -> cadence.Schedule:
    if isinstance(value, cadence.Schedule):
        return value
    if not isinstance(value, str):
        raise ValueError(f"invalid schedule {value!r}: expected {cadence.VALID_SCHEDULES}")
    return cadence.parse_schedule(value)


def _format_interval(value: timedelta) -> str:
    return f"{int(value.total_seconds())}s"


#: A duration written as "30s", "5m", "1h", "2d" or "1h30m".
Interval = Annotated[timedelta, PlainValidator(_interval), PlainSerializer(_format_interval)]
ScheduleField = Annotated[cadence.Schedule, PlainValidator(_schedule), PlainSerializer(str)]


def positive(value: timedelta) -> timedelta:
    """`value`, refused unless it is longer than 0s."""
    if value <= timedelta(0):
        raise ValueError("must be longer than 0s")
    return value
