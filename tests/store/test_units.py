"""Durations, times and money read exactly enough to be true, the same everywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from store import units

NOW = datetime(2026, 12, 4, 17, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0 s"), (7, "7 s"), (40, "40 s"), (60, "1 min"), (150, "2 min 30 s"),
     (3600, "1 h"), (3600 + 5, "1 h"), (5400, "1 h 30 min"), (86_400, "1 d"),
     (90_000, "1 d 1 h"), (-40, "-40 s")],
)  # fmt: skip
def test_durations_show_their_two_largest_units(seconds: int, shown: str) -> None:
    assert units.duration(seconds) == shown
    assert units.duration(timedelta(seconds=seconds)) == shown


def test_ages_and_moments() -> None:
    assert units.ago(NOW - timedelta(seconds=150), NOW) == "2 min 30 s ago"
    assert units.ago(NOW + timedelta(minutes=14), NOW) == "in 14 min"
    assert units.ago(None, NOW) == "never"
    assert units.when(NOW) == "2026-12-04 17:10 UTC"
    assert units.time_of_day(NOW + timedelta(seconds=5)) == "17:10:05 UTC"
    assert units.day(NOW) == "2026-12-04"


@pytest.mark.parametrize(
    ("micros", "shown"),
    [(0, "$0.00"), (28, "$0.000028"), (4_999, "$0.004999"), (150_000, "$0.15"),
     (1_234_567, "$1.234567"), (1_234_500_000, "$1,234.50"), (10**12, "$1,000,000.00"),
     (-50_000, "-$0.05")],
)  # fmt: skip
def test_money_is_never_rounded_to_a_cent_it_is_not(micros: int, shown: str) -> None:
    assert units.usd(micros) == shown
