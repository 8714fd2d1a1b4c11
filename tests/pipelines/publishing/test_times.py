"""When a schedule's slots fall, on instants given as parameters: the two DST change
days of 2026 in Europe/Berlin, local days, a week's count, the next slots, and what
min_gap and grace let fire (after downtime: one catch-up, never a burst)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pipelines.config import schedules
from pipelines.publishing import times

BERLIN = ZoneInfo("Europe/Berlin")
THREE = ["01:30", "02:30", "03:30"]
WEEKDAYS = ["mon", "tue", "wed", "thu", "fri"]


def schedule(**fields: Any) -> schedules.Schedule:
    """A schedule as a pipeline file's publish: block writes it."""
    return schedules.PublishConfig.model_validate(fields).resolved


def utc(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), UTC)


def seen(slots: list[times.Slot], zone: ZoneInfo = BERLIN) -> list[str]:
    """Each slot as it is written, and when it fires on the local clock."""
    return [f"{s.time:%H:%M} at {s.at.astimezone(zone):%a %H:%M %z}" for s in slots]


def test_spring_forward_a_slot_in_the_skipped_hour_fires_when_the_clocks_land() -> None:
    # 29 March 2026: Berlin's clocks jump from 02:00 CET to 03:00 CEST (01:00 UTC).
    berlin = schedule(timezone="Europe/Berlin", slots=THREE)
    day = times.on(berlin, date(2026, 3, 29))
    assert seen(day) == [
        "01:30 at Sun 01:30 +0100",
        "02:30 at Sun 03:00 +0200",
        "03:30 at Sun 03:30 +0200",
    ]
    assert [s.at for s in day] == [
        utc(date(2026, 3, 29), h, m) for h, m in ((0, 30), (1, 0), (1, 30))
    ]
    # The days around it keep their 02:30.
    assert seen(times.on(berlin, date(2026, 3, 28)))[1] == "02:30 at Sat 02:30 +0100"
    assert seen(times.on(berlin, date(2026, 3, 30)))[1] == "02:30 at Mon 02:30 +0200"


def test_fall_back_a_slot_in_the_repeated_hour_fires_once_at_its_first() -> None:
    # 25 October 2026: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:30 happens twice.
    berlin = schedule(timezone="Europe/Berlin", slots=THREE)
    midnight = datetime(2026, 10, 25, tzinfo=BERLIN)
    whole_day = times.between(berlin, midnight, midnight + timedelta(days=1))  # 25 hours
    assert seen(whole_day) == [
        "01:30 at Sun 01:30 +0200",
        "02:30 at Sun 02:30 +0200",
        "03:30 at Sun 03:30 +0100",
    ]
    # Both 02:30s (00:30 and 01:30 UTC) lie in this window: one slot fires.
    twice = times.between(berlin, utc(date(2026, 10, 25), 0), utc(date(2026, 10, 25), 2))
    assert [s.at for s in twice] == [utc(date(2026, 10, 25), 0, 30)]


def test_a_half_hour_jump_is_landed_on_too() -> None:
    # Lord Howe Island moves its clocks half an hour: 02:00 becomes 02:30 (+1030 to +11).
    howe = ZoneInfo("Australia/Lord_Howe")
    island = schedule(timezone="Australia/Lord_Howe", slots=["02:15"])
    assert seen(times.on(island, date(2026, 10, 4)), howe) == ["02:15 at Sun 02:30 +1100"]


def test_days_are_the_schedules_local_days() -> None:
    # Monday 08:00 in Tokyo is Sunday 23:00 UTC.
    tokyo = schedule(timezone="Asia/Tokyo", slots=["08:00"], days=["mon"])
    march = times.between(tokyo, utc(date(2026, 3, 1), 0), utc(date(2026, 4, 1), 0))
    assert [s.day for s in march] == [date(2026, 3, d) for d in (2, 9, 16, 23, 30)]
    assert {s.at.weekday() for s in march} == {6} and {s.at.hour for s in march} == {23}
    assert times.on(tokyo, date(2026, 3, 3)) == []


@pytest.mark.parametrize(
    "monday", [date(2026, 3, 2), date(2026, 3, 23), date(2026, 10, 19)], ids=str
)  # an ordinary week, and the weeks the clocks change
@pytest.mark.parametrize(("days", "count"), [(None, 21), (WEEKDAYS, 15), (["sat", "sun"], 6)])
def test_a_weeks_slots(monday: date, days: list[str] | None, count: int) -> None:
    berlin = schedule(timezone="Europe/Berlin", slots=["08:30", "12:00", "02:30"], days=days)
    start = datetime.combine(monday, time(), BERLIN)
    week = times.between(berlin, start, start + timedelta(days=7))
    assert len(week) == count
    assert [s.at for s in week] == sorted(s.at for s in week)
    assert len({(s.day, s.time) for s in week}) == count
    assert {s.day.strftime("%a").lower() for s in week} == set(days or schedules.DAYS)


def test_the_next_slots_count_from_now_and_skip_the_days_off() -> None:
    berlin = schedule(timezone="Europe/Berlin", slots=["08:30", "12:00", "17:30"], days=WEEKDAYS)
    friday_noon = datetime(2026, 3, 6, 12, 0, tzinfo=BERLIN)
    assert seen(times.upcoming(berlin, friday_noon, 3)) == [
        "12:00 at Fri 12:00 +0100",  # a slot at now is still to come
        "17:30 at Fri 17:30 +0100",
        "08:30 at Mon 08:30 +0100",
    ]
    assert times.upcoming(berlin, friday_noon, 0) == []
    later = times.upcoming(berlin, friday_noon + timedelta(seconds=1), 1)
    assert seen(later) == ["17:30 at Fri 17:30 +0100"]


def test_the_next_slot_west_of_utc_is_on_the_local_day_before() -> None:
    # 02:00 UTC on a Monday is still Sunday evening in New York: Sunday's 22:00 is next.
    evening = schedule(timezone="America/New_York", slots=["22:00"])
    monday_utc = utc(date(2026, 3, 2), 2)
    assert seen(times.upcoming(evening, monday_utc, 1), ZoneInfo("America/New_York")) == [
        "22:00 at Sun 22:00 -0500"
    ]


NOON = utc(date(2026, 3, 2), 12)


@pytest.mark.parametrize(
    ("now", "last_fired", "fires"),
    [
        (NOON - timedelta(hours=1), None, NOON),  # on time
        (NOON + timedelta(minutes=10), None, NOON + timedelta(minutes=10)),  # late, in grace
        (NOON + timedelta(minutes=15), None, NOON + timedelta(minutes=15)),  # grace's last
        (NOON + timedelta(minutes=16), None, None),  # past grace: expires
        (NOON, NOON - timedelta(minutes=80), NOON + timedelta(minutes=10)),  # min_gap waits
        (NOON, NOON - timedelta(minutes=30), None),  # min_gap would wait past grace
    ],
)
def test_a_slot_fires_at_its_time_spaced_by_min_gap_within_grace(
    now: datetime, last_fired: datetime | None, fires: datetime | None
) -> None:
    noon = schedule(timezone="UTC", slots=["12:00"], min_gap="90m", grace="15m")
    [slot] = times.on(noon, NOON.date())
    assert times.fire_at(noon, slot, now, last_fired) == fires


def test_three_hours_down_across_four_slots_gives_one_catch_up_and_three_expired() -> None:
    hourly = schedule(timezone="UTC", slots=["09:00", "10:00", "11:00", "12:00"], grace="15m")
    stopped, back = utc(date(2026, 3, 2), 8, 58), utc(date(2026, 3, 2), 12, 5)
    missed = times.between(hourly, stopped, back)
    plan = times.catch_up(hourly, reversed(missed), back, last_fired=None)
    assert plan.fire is not None and plan.fire.time == time(12) and plan.fire_at == back
    assert [s.time for s in plan.expired] == [time(9), time(10), time(11)]


def test_a_catch_up_is_never_a_burst() -> None:
    close = schedule(timezone="UTC", slots=["12:00", "12:05"], grace="15m")
    missed = times.on(close, NOON.date())
    plan = times.catch_up(close, missed, NOON + timedelta(minutes=7), last_fired=None)
    assert plan.fire == missed[0] and plan.expired == (missed[1],)
    # Posted by hand at 11:50, then down: by 12:10, min_gap would hold 12:00 past its grace.
    spaced = schedule(timezone="UTC", slots=["12:00", "12:30"], grace="15m", min_gap="30m")
    [noon, _] = times.on(spaced, NOON.date())
    by_hand, back = NOON - timedelta(minutes=10), NOON + timedelta(minutes=10)
    assert times.catch_up(spaced, [noon], back, by_hand) == times.CatchUp(None, None, (noon,))
    assert times.catch_up(spaced, [noon], back, None) == times.CatchUp(noon, back, ())


def test_instants_must_be_aware_and_missed_slots_past() -> None:
    utc_noon = schedule(timezone="UTC", slots=["12:00"])
    with pytest.raises(ValueError, match="start must be an aware datetime"):
        times.upcoming(utc_noon, datetime(2026, 3, 2, 12), 1)
    [slot] = times.on(utc_noon, NOON.date())
    with pytest.raises(ValueError, match="a slot after now is not missed"):
        times.catch_up(utc_noon, [slot], NOON - timedelta(seconds=1), None)
