"""Waiting after a failure: the backoff formula and the peer's own word on how long.

    retry.backoff_s(3, first=0.5, cap=8.0)              # 2.0: 0.5, 1, 2, 4, 8, 8, ...
    retry.retry_after_s(response.headers, now)           # seconds the server asked for, or None
    retry.seconds(exc.retry_after)                       # python-telegram-bot's int or timedelta

Each caller picks its own first wait, cap and jitter; the doubling lives here once.
Pure and light (no I/O, no clock): the CLI and the provider settings import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

# Past this many doublings every cap in use is reached; the bound keeps 2**n finite.
_MAX_DOUBLINGS = 64


def backoff_s(failures: int, first: float, cap: float) -> float:
    """The wait after the n-th failure in a row: first, 2 x first, 4 x first, ... at most cap."""
    doublings = min(max(failures - 1, 0), _MAX_DOUBLINGS)
    return float(min(first * 2.0**doublings, cap))


def retry_after_s(headers: Mapping[str, str], now: datetime | None) -> float | None:
    """The wait a server asked for, in seconds, or None when it did not say (or said nonsense).

    `retry-after-ms` wins, then `retry-after` as seconds, then as an HTTP date measured
    from `now` (without `now` a date is ignored, and the caller's backoff covers it).
    Header names are matched without regard to case.
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    millis = _non_negative(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _non_negative(value)
    if seconds is not None or now is None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # unreadable: fall back to backoff rather than guess
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # RFC 9110 dates are GMT
    return max(0.0, (when - now).total_seconds())


def seconds(value: float | timedelta) -> float:
    """A wait given as a number of seconds or a timedelta (Telegram's RetryAfter gives either)."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _non_negative(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
