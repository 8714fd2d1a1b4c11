"""Time at the store's edge: aware UTC datetimes in code, integer milliseconds in SQL.

Nothing here reads the clock: callers pass `now` in, so tests choose the time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from store import errors

_MIN = datetime(1970, 1, 1, tzinfo=UTC)
_MAX = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def to_ms(value: datetime) -> int:
    """Milliseconds since the epoch; rejects naive datetimes and years outside 1970..9999."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise errors.TimestampOutOfRange(f"timestamp {value.isoformat()} has no timezone")
    try:
        utc = value.astimezone(UTC)
    except OverflowError as exc:  # an offset that pushes year 1 or 9999 over the edge
        raise errors.TimestampOutOfRange(
            f"timestamp {value.isoformat()} lies outside 1970..9999 UTC"
        ) from exc
    if not _MIN <= utc <= _MAX:
        raise errors.TimestampOutOfRange(
            f"timestamp {value.isoformat()} lies outside 1970..9999 UTC"
        )
    delta = utc - _MIN
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(value: int) -> datetime:
    """The aware UTC datetime for milliseconds since the epoch."""
    return _MIN + timedelta(milliseconds=value)


def maybe_from_ms(value: int | None) -> datetime | None:
    return None if value is None else from_ms(value)
