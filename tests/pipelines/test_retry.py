"""The one backoff formula and the one Retry-After reader."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipelines.ground import retry

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_backoff_doubles_from_first_and_stops_at_the_cap() -> None:
    assert [retry.backoff_s(n, 0.5, 8.0) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 8, 8]
    assert retry.backoff_s(0, 5.0, 600.0) == 5.0  # no failure yet counts as the first
    assert retry.backoff_s(10**9, 5.0, 600.0) == 600.0


@pytest.mark.parametrize(
    ("headers", "now", "expected"),
    [
        ({}, NOW, None),
        ({"Retry-After": "7"}, NOW, 7.0),
        ({"retry-after": " 2.5 "}, None, 2.5),
        ({"retry-after": "3", "retry-after-ms": "250"}, NOW, 0.25),
        ({"retry-after": "Tue, 01 Dec 2026 12:00:30 GMT"}, NOW, 30.0),
        ({"retry-after": "Tue, 01 Dec 2026 11:00:00 GMT"}, NOW, 0.0),  # already past
        ({"retry-after": "Tue, 01 Dec 2026 12:00:30 GMT"}, None, None),  # no clock: ignored
        ({"retry-after": "-5"}, NOW, None),
        ({"retry-after": "nan"}, NOW, None),
        ({"retry-after": "soon"}, NOW, None),
        ({"retry-after-ms": "inf", "retry-after": "4"}, NOW, 4.0),
    ],
)
def test_retry_after_reads_what_the_server_asked(
    headers: dict[str, str], now: datetime | None, expected: float | None
) -> None:
    assert retry.retry_after_s(headers, now) == expected


def test_seconds_takes_a_number_or_a_timedelta() -> None:
    assert retry.seconds(5) == 5.0
    assert retry.seconds(timedelta(seconds=2.5)) == 2.5
