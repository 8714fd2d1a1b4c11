"""What a provider says about its rate limits on an answer, read from the headers.

    stated = limits.read(response.headers, now)
    stated.requests_limit, stated.requests_left, stated.tokens_left   # None: not said

OpenAI says `x-ratelimit-limit-requests`, `x-ratelimit-remaining-requests`,
`x-ratelimit-remaining-tokens` and `x-ratelimit-reset-requests` / `-tokens` as a
duration (`1s`, `6m0s`, `20ms`); Anthropic says `anthropic-ratelimit-requests-limit`,
`-requests-remaining`, `-tokens-remaining` and `-requests-reset` / `-tokens-reset` as an
RFC 3339 time. A value that cannot be read counts as not said: pacing then falls back
on what it knew, never on a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

#: One part of an OpenAI duration: `6m0s` is two parts, `20ms` one.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Stated:
    """A provider's rate-limit headers on one answer; None where it said nothing."""

    requests_limit: int | None = None
    requests_left: int | None = None
    #: Seconds from the answer until the request count is back to its limit.
    requests_reset_s: float | None = None
    tokens_left: int | None = None
    tokens_reset_s: float | None = None


def read(headers: Mapping[str, str], now: datetime) -> Stated:
    """The limits stated in `headers` (names in any case); resets measured from `now`."""
    h = {name.lower(): value for name, value in headers.items()}
    if any(name.startswith("anthropic-ratelimit-") for name in h):
        p = "anthropic-ratelimit-"
        return Stated(
            _count(h.get(p + "requests-limit")),
            _count(h.get(p + "requests-remaining")),
            _until(h.get(p + "requests-reset"), now),
            _count(h.get(p + "tokens-remaining")),
            _until(h.get(p + "tokens-reset"), now),
        )
    return Stated(
        _count(h.get("x-ratelimit-limit-requests")),
        _count(h.get("x-ratelimit-remaining-requests")),
        duration_s(h.get("x-ratelimit-reset-requests")),
        _count(h.get("x-ratelimit-remaining-tokens")),
        duration_s(h.get("x-ratelimit-reset-tokens")),
    )


def duration_s(value: str | None) -> float | None:
    """An OpenAI reset (`1s`, `6m0s`, `1h2m3.5s`, `20ms`, or plain seconds) in seconds."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        parts = _PART.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            return None
        seconds = sum(float(n) * _UNIT_S[u] for n, u in parts)
    return seconds if seconds >= 0 else None


def _count(value: str | None) -> int | None:
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


def _until(value: str | None, now: datetime) -> float | None:
    """Seconds from `now` to an RFC 3339 time (never negative)."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())
