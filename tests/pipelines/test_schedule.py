"""Schedules: parsing, next_run over a table of aware UTC datetimes, and misfire handling."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone

import pytest

from pipelines.ground import cadence
from pipelines.ground.cadence import Action


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("1h", timedelta(hours=1)),
        ("2d", timedelta(days=2)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        (" 0s ", timedelta(0)),
        ("24H", timedelta(hours=24)),
    ],
)
def test_parse_interval(text: str, expected: timedelta) -> None:
    assert cadence.parse_interval(text) == expected


@pytest.mark.parametrize("text", ["", "5", "m", "5x", "-5m", "1.5h", "30m1h", "5 m", "1w"])
def test_parse_interval_rejects_with_valid_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid interval .*like 30s, 5m, 1h, 2d or 1h30m"):
        cadence.parse_interval(text)


@pytest.mark.parametrize(
    ("text", "kind", "interval", "cron"),
    [
        ("5m", "interval", timedelta(minutes=5), None),
        ("1h30m", "interval", timedelta(minutes=90), None),
        ("*/15 * * * *", "cron", None, "*/15 * * * *"),
        ("0  9 * * 1-5", "cron", None, "0 9 * * 1-5"),
        ("manual", "manual", None, None),
        ("Manual", "manual", None, None),
    ],
)
def test_parse_schedule(text: str, kind: str, interval: timedelta | None, cron: str | None) -> None:
    parsed = cadence.parse_schedule(text)
    assert (parsed.kind, parsed.interval, parsed.cron) == (kind, interval, cron)


@pytest.mark.parametrize(
    "text", ["", "often", "5x", "0s", "* * * *", "* * * * * *", "61 * * * *", "@daily"]
)
def test_parse_schedule_rejects_with_valid_forms(text: str) -> None:
    with pytest.raises(ValueError) as info:
        cadence.parse_schedule(text)
    message = str(info.value)
    assert repr(" ".join(text.split())) in message or repr(text) in message
    if text != "0s":
        assert "an interval like 5m or 1h, a 5-field cron expression, or manual" in message
    else:
        assert "longer than 0s" in message


@pytest.mark.parametrize(
    ("text", "previous", "expected"),
    [
        # intervals
        ("30s", utc(2024, 1, 1, 10, 0, 0), utc(2024, 1, 1, 10, 0, 30)),
        ("5m", utc(2024, 1, 1, 23, 58), utc(2024, 1, 2, 0, 3)),
        ("1d", utc(2024, 2, 28, 12), utc(2024, 2, 29, 12)),  # leap day
        ("1h30m", utc(2024, 12, 31, 23, 0), utc(2025, 1, 1, 0, 30)),
        # cron, strictly after previous
        ("*/15 * * * *", utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 15)),
        ("*/15 * * * *", utc(2024, 1, 1, 10, 7, 30), utc(2024, 1, 1, 10, 15)),
        ("*/15 * * * *", utc(2024, 1, 1, 10, 59), utc(2024, 1, 1, 11, 0)),  # hour boundary
        ("0 0 * * *", utc(2024, 1, 1, 23, 59, 59), utc(2024, 1, 2, 0, 0)),  # day boundary
        ("0 9 1 * *", utc(2024, 1, 31, 10), utc(2024, 2, 1, 9)),  # month boundary
        ("0 0 1 1 *", utc(2024, 6, 1), utc(2025, 1, 1)),  # year boundary
        # Europe's DST change (2024-03-31 01:00 UTC) does not bend UTC cron
        ("30 1 * * *", utc(2024, 3, 31, 0, 0), utc(2024, 3, 31, 1, 30)),
        ("0 2 * * *", utc(2024, 10, 27, 0, 30), utc(2024, 10, 27, 2, 0)),
        ("0 9 * * 1-5", utc(2024, 1, 5, 9, 0), utc(2024, 1, 8, 9, 0)),  # Friday -> Monday
    ],
)
def test_next_run_table(text: str, previous: datetime, expected: datetime) -> None:
    got = cadence.next_run(cadence.parse_schedule(text), previous)
    assert got == expected
    assert got is not None and got.tzinfo is UTC


def test_next_run_converts_other_offsets_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    previous = datetime(2024, 1, 1, 12, 0, tzinfo=plus_two)  # 10:00 UTC
    got = cadence.next_run(cadence.parse_schedule("0 11 * * *"), previous)
    assert got == utc(2024, 1, 1, 11, 0)


def test_next_run_manual_is_none() -> None:
    assert cadence.next_run(cadence.parse_schedule("manual"), utc(2024, 1, 1)) is None


@pytest.mark.parametrize("text", ["5m", "*/15 * * * *", "manual"])
def test_naive_datetimes_are_rejected(text: str) -> None:
    parsed = cadence.parse_schedule(text)
    with pytest.raises(ValueError, match="aware"):
        cadence.next_run(parsed, datetime(2024, 1, 1, 10, 0))
    with pytest.raises(ValueError, match="aware"):
        cadence.due_action(parsed, utc(2024, 1, 1), datetime(2024, 1, 1), timedelta(hours=1))


@pytest.mark.parametrize("text", ["5m", "0 * * * *"])
def test_jitter_is_bounded_and_seeded(text: str) -> None:
    parsed = cadence.parse_schedule(text)
    previous = utc(2024, 1, 1, 10, 0)
    base = cadence.next_run(parsed, previous)
    assert base is not None
    jitter = timedelta(seconds=30)
    rng = random.Random(7)
    results = [cadence.next_run(parsed, previous, jitter=jitter, rng=rng) for _ in range(200)]
    assert all(r is not None and base <= r <= base + jitter for r in results)
    assert len(set(results)) > 100  # it really spreads
    again = random.Random(7)
    assert results[0] == cadence.next_run(parsed, previous, jitter=jitter, rng=again)


def test_negative_jitter_is_rejected() -> None:
    with pytest.raises(ValueError, match="jitter"):
        cadence.next_run(
            cadence.parse_schedule("5m"), utc(2024, 1, 1), jitter=timedelta(seconds=-1)
        )


HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("text", "due", "now", "action", "next_due"),
    [
        # not yet due
        ("5m", utc(2024, 1, 1, 10, 5), utc(2024, 1, 1, 10, 4, 59), Action.WAIT,
         utc(2024, 1, 1, 10, 5)),
        # exactly due
        ("5m", utc(2024, 1, 1, 10, 5), utc(2024, 1, 1, 10, 5), Action.RUN,
         utc(2024, 1, 1, 10, 10)),
        # 40 minutes down with a 5m schedule: eight missed slots coalesce into one run
        ("5m", utc(2024, 1, 1, 10, 5), utc(2024, 1, 1, 10, 45), Action.RUN,
         utc(2024, 1, 1, 10, 50)),
        # exactly at the edge of the misfire window: still runs
        ("5m", utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 11, 0), Action.RUN,
         utc(2024, 1, 1, 11, 5)),
        # a day down: missed run skipped, next computed from now
        ("5m", utc(2024, 1, 1, 10, 5), utc(2024, 1, 2, 10, 3), Action.SKIP_MISSED,
         utc(2024, 1, 2, 10, 8)),
        # cron coalescing: down 10:00..10:50 with */15, one run, next slot after now
        ("*/15 * * * *", utc(2024, 1, 1, 10, 0), utc(2024, 1, 1, 10, 50), Action.RUN,
         utc(2024, 1, 1, 11, 0)),
        # cron across a long outage (over a month boundary): skipped
        ("0 9 * * *", utc(2024, 1, 30, 9, 0), utc(2024, 2, 2, 8, 0), Action.SKIP_MISSED,
         utc(2024, 2, 2, 9, 0)),
        # manual never becomes due
        ("manual", None, utc(2024, 1, 1, 10, 0), Action.WAIT, None),
    ],
)  # fmt: skip
def test_due_action_table(
    text: str, due: datetime | None, now: datetime, action: Action, next_due: datetime | None
) -> None:
    decision = cadence.due_action(cadence.parse_schedule(text), due, now, HOUR)
    assert decision == cadence.Decision(action, next_due)


def test_due_action_applies_jitter_to_the_following_run() -> None:
    parsed = cadence.parse_schedule("5m")
    now = utc(2024, 1, 1, 10, 5)
    decision = cadence.due_action(
        parsed, now, now, HOUR, jitter=timedelta(seconds=10), rng=random.Random(1)
    )
    assert decision.action is Action.RUN
    assert decision.next_due_at is not None
    assert (
        now + timedelta(minutes=5) <= decision.next_due_at <= now + timedelta(minutes=5, seconds=10)
    )


@pytest.mark.parametrize(
    ("text", "now", "expected"),
    [
        ("5m", utc(2024, 1, 1, 10, 7), utc(2024, 1, 1, 10, 7)),
        ("0 * * * *", utc(2024, 1, 1, 10, 7), utc(2024, 1, 1, 11, 0)),
        ("manual", utc(2024, 1, 1, 10, 7), None),
    ],
)
def test_first_due(text: str, now: datetime, expected: datetime | None) -> None:
    assert cadence.first_due(cadence.parse_schedule(text), now) == expected
