"""Time at the store's edge: aware UTC datetimes in code, integer milliseconds in SQL.

Nothing here reads the clock: callers pass `now` in, so tests choose the time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from store import errors

_MIN = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
#: 9999-12-31 23:59:59.999 UTC: the last millisecond a timestamp may name.
_MAX_MS = 253_402_300_799_999

# Every transition converts several times each way, so these two are written for speed:
# one aware subtraction and one floor division rather than a float timestamp, and
# positional timedelta arguments, which skip keyword parsing.


def to_ms(value: datetime) -> int:
    """Milliseconds since the epoch; rejects naive datetimes and years outside 1970..9999."""
    if value.utcoffset() is None:
        raise errors.TimestampOutOfRange(f"timestamp {value.isoformat()} has no timezone")
    ms = (value - _MIN) // _MS  # aware subtraction: the offset is applied, nothing overflows
    if not 0 <= ms <= _MAX_MS:
        raise errors.TimestampOutOfRange(
            f"timestamp {value.isoformat()} lies outside 1970..9999 UTC"
        )
    return ms


def from_ms(value: int) -> datetime:
    """The aware UTC datetime for milliseconds since the epoch."""
    return _MIN + timedelta(0, 0, 0, value)


def maybe_from_ms(value: int | None) -> datetime | None:
    return None if value is None else from_ms(value)
