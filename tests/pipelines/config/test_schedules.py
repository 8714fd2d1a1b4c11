"""A pipeline's `publish:` block and the named schedules of schedules.yaml, as the
pipeline directory loads them: what each valid block resolves to, and each bad one's
error, exactly as `gatehouse check` prints it (file:line: field: reason)."""

from __future__ import annotations

from datetime import time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pipelines.config import names, schedules, spec

PIPELINE = """\
name: {name}
schedule: 15m
sources:
  - type: rss
    url: http://127.0.0.1:1/feed.xml
dispatch:
  type: none
"""

SCHEDULES = """\
city:
  timezone: Europe/Berlin
  slots: ["08:30", "12:00", "17:30"]
  days: [mon, tue, wed, thu, fri]
  min_gap: 90m
night:
  timezone: America/New_York
  slots: ["22:00"]
"""

EVERY_DAY = frozenset(range(7))


def _load(folder: Path, publish: str, name: str = "news") -> tuple[spec.Pipeline | None, list[str]]:
    """`publish` (the block's lines, from line 8 of the file) in a pipeline file of `folder`:
    the pipeline, and the errors with the folder left out of every file name."""
    text = PIPELINE.format(name=name) + publish
    (folder / f"{name}.yaml").write_text(text)
    loaded = spec.load_dir(folder)
    errors = [str(error).replace(f"{folder}/", "") for error in loaded.errors]
    return loaded.pipelines.get(name), errors


@pytest.mark.parametrize(
    ("publish", "expected"),
    [
        (
            'publish:\n  timezone: Europe/Berlin\n  slots: ["17:30", "08:30"]\n'
            "  days: [mon, fri]\n  min_gap: 90m\n  grace: 5m\n",
            schedules.Schedule(
                None, ZoneInfo("Europe/Berlin"), (time(8, 30), time(17, 30)),
                frozenset({0, 4}), timedelta(minutes=90), timedelta(minutes=5),
            ),
        ),
        (
            'publish: {timezone: UTC, slots: ["8:05"]}\n',
            schedules.Schedule(
                None, ZoneInfo("UTC"), (time(8, 5),), EVERY_DAY, timedelta(0),
                timedelta(minutes=15),
            ),
        ),
        (
            # No two days in a row: the evening slot is never followed by the morning one.
            'publish: {timezone: UTC, slots: ["08:00", "22:00"], days: [mon, wed],'
            " min_gap: 12h}\n",
            schedules.Schedule(
                None, ZoneInfo("UTC"), (time(8), time(22)), frozenset({0, 2}),
                timedelta(hours=12), timedelta(minutes=15),
            ),
        ),
    ],
)  # fmt: skip
def test_a_schedule_of_its_own_resolves(
    tmp_path: Path, publish: str, expected: schedules.Schedule
) -> None:
    pipeline, errors = _load(tmp_path, publish)
    assert errors == [] and pipeline is not None and pipeline.publish is not None
    assert pipeline.publish.resolved == expected
    # Written back out, it reads the same.
    again = schedules.PublishConfig.model_validate(pipeline.publish.model_dump())
    assert again.resolved == expected


def test_without_a_publish_block_nothing_changes(tmp_path: Path) -> None:
    pipeline, errors = _load(tmp_path, "")
    assert errors == [] and pipeline is not None and pipeline.publish is None
    assert spec.Pipeline.model_fields["publish"].default is None


TZ = "  timezone: Europe/Berlin\n"
SLOTS = '  slots: ["08:30"]\n'


@pytest.mark.parametrize(
    ("publish", "error"),
    [
        (
            'publish:\n  timezone: Europe/Berln\n' + SLOTS,
            "news.yaml:9: publish.timezone: unknown time zone 'Europe/Berln';"
            " did you mean Europe/Berlin?",
        ),
        (
            "publish:\n  timezone: europe/berlin\n" + SLOTS,
            "news.yaml:9: publish.timezone: unknown time zone 'europe/berlin';"
            " did you mean Europe/Berlin?",
        ),
        (
            "publish:\n  timezone: PST\n" + SLOTS,
            "news.yaml:9: publish.timezone: unknown time zone 'PST': use an IANA name like"
            " Europe/Berlin, America/New_York or UTC; an abbreviation such as PST or CEST is"
            " not a zone (it changes with the season)",
        ),
        (
            "publish:\n  timezone: Mars/Olympus_Mons\n" + SLOTS,
            "news.yaml:9: publish.timezone: unknown time zone 'Mars/Olympus_Mons': use an"
            " IANA name like Europe/Berlin, America/New_York or UTC",
        ),
        (
            "publish:\n  timezone: localtime\n" + SLOTS,
            "news.yaml:9: publish.timezone: 'localtime' names no place (it depends on the"
            " host): use an IANA name like Europe/Berlin, America/New_York or UTC",
        ),
        (
            'publish:\n' + TZ + '  slots: ["08:30", "25:00"]\n',
            "news.yaml:10: publish.slots.1: invalid time '25:00': hours run 00 to 23 and"
            ' minutes 00 to 59, like "23:30"',
        ),
        (
            'publish:\n' + TZ + '  slots: ["12:60"]\n',
            "news.yaml:10: publish.slots.0: invalid time '12:60': hours run 00 to 23 and"
            ' minutes 00 to 59, like "23:30"',
        ),
        (
            'publish:\n' + TZ + '  slots: ["8.30"]\n',
            "news.yaml:10: publish.slots.0: invalid time '8.30': write hours and minutes,"
            ' like "08:30"',
        ),
        (
            # YAML 1.1 reads 12:00 unquoted as a number in base 60.
            "publish:\n" + TZ + "  slots: [12:00]\n",
            "news.yaml:10: publish.slots.0: YAML reads an unquoted time as a number"
            ' (here 720): quote it, "12:00"',
        ),
        (
            "publish:\n" + TZ + "  slots: [25:00]\n",
            "news.yaml:10: publish.slots.0: invalid time '25:00': hours run 00 to 23 and"
            ' minutes 00 to 59, like "23:30"',
        ),
        (
            'publish:\n' + TZ + '  slots: ["08:30", "12:00", "08:30"]\n',
            "news.yaml:10: publish.slots: 08:30 listed twice: list each time once",
        ),
        (
            "publish:\n" + TZ + "  slots: []\n",
            'news.yaml:10: publish.slots: list at least one time, like ["08:30"]; without'
            " publish: a post goes at once",
        ),
        (
            "publish:\n" + TZ + SLOTS + "  days: []\n",
            "news.yaml:11: publish.days: days: [] would never post: list a day, or leave days"
            " out for every day",
        ),
        (
            "publish:\n" + TZ + SLOTS + "  days: [mon, fri, mon]\n",
            "news.yaml:11: publish.days: mon listed twice: list each day once",
        ),
        (
            "publish:\n" + TZ + SLOTS + "  days: [monday]\n",
            "news.yaml:11: publish.days.0: must be one of 'mon', 'tue', 'wed', 'thu', 'fri',"
            " 'sat' or 'sun'",
        ),
        (
            "publish:\n" + TZ + SLOTS + "  min_gap: 90\n",
            "news.yaml:11: publish.min_gap: invalid interval 90: expected a number with a"
            " unit s, m, h or d, like 30s, 5m, 1h, 2d or 1h30m",
        ),
        (
            "publish:\n" + TZ + SLOTS + "  grace: 2d\n",
            "news.yaml:11: publish.grace: must be at most 1d, not 2d: a slot a day late is no"
            " slot",
        ),
        (
            'publish:\n' + TZ + '  slots: ["09:00", "08:30"]\n  min_gap: 90m\n',
            "news.yaml:11: publish.min_gap: slots 08:30 and 09:00 are 30m apart, closer than"
            " min_gap 1h30m: the later would always wait; space them at least 1h30m apart or"
            " lower min_gap",
        ),
        (
            # Every day: the evening slot is followed by the next morning's, 10h later.
            'publish:\n' + TZ + '  slots: ["08:00", "22:00"]\n  min_gap: 12h\n',
            "news.yaml:11: publish.min_gap: slots 22:00 and 08:00 are 10h apart, closer than"
            " min_gap 12h: the later would always wait; space them at least 12h apart or"
            " lower min_gap",
        ),
        (
            "publish: {}\n",
            "news.yaml:8: publish: publish needs schedule: NAME (a schedule of"
            ' schedules.yaml) or a schedule of its own: timezone: Europe/Berlin, slots:'
            ' ["08:30", "17:30"]',
        ),
        (
            "publish:\n" + TZ,
            'news.yaml:8: publish: a schedule needs slots: timezone: Europe/Berlin, slots:'
            ' ["08:30", "17:30"]',
        ),
        (
            "publish:\n" + TZ + SLOTS + "  slot: 1\n",
            "news.yaml:11: publish.slot: unknown field 'slot'; valid: schedule, timezone,"
            " slots, days, min_gap, grace",
        ),
        (
            "publish:\n  schedule: Bad Name\n",
            "news.yaml:9: publish.schedule: must be the name of a schedule in schedules.yaml,"
            " like city",
        ),
    ],
)  # fmt: skip
def test_a_bad_block_is_an_error_at_its_line(tmp_path: Path, publish: str, error: str) -> None:
    pipeline, errors = _load(tmp_path, publish)
    assert pipeline is None
    assert errors == [error]


def test_a_named_schedule_comes_from_schedules_yaml(tmp_path: Path) -> None:
    (tmp_path / "schedules.yaml").write_text(SCHEDULES)
    news, errors = _load(tmp_path, "publish:\n  schedule: city\n")
    digest, more = _load(tmp_path, "publish: {schedule: city}\n", name="digest")
    assert errors == more == [] and news and digest and news.publish and digest.publish
    assert news.publish.resolved == digest.publish.resolved == schedules.Schedule(
        "city", ZoneInfo("Europe/Berlin"), (time(8, 30), time(12), time(17, 30)),
        frozenset(range(5)), timedelta(minutes=90), timedelta(minutes=15),
    )  # fmt: skip
    # The schedules file is no pipeline file: nothing tries to load it as one.
    assert [p.name for p in names.files(tmp_path)] == ["digest.yaml", "news.yaml"]
    assert sorted(spec.load_dir(tmp_path).pipelines) == ["digest", "news"]


@pytest.mark.parametrize(
    ("publish", "error"),
    [
        (
            "publish:\n  schedule: cty\n",
            "news.yaml:9: publish.schedule: unknown schedule 'cty'; schedules.yaml defines:"
            " city, night",
        ),
        (
            "publish:\n  schedule: city\n" + SLOTS,
            "news.yaml:8: publish: schedule: city and slots together: name a schedule of"
            " schedules.yaml or write one out here, not both",
        ),
    ],
)
def test_a_bad_name_says_what_there_is(tmp_path: Path, publish: str, error: str) -> None:
    (tmp_path / "schedules.yaml").write_text(SCHEDULES)
    assert _load(tmp_path, publish) == (None, [error])


def test_a_name_without_a_schedules_file_says_where_to_write_it(tmp_path: Path) -> None:
    _, errors = _load(tmp_path, "publish:\n  schedule: city\n")
    assert errors == [
        "news.yaml:9: publish.schedule: unknown schedule 'city': there is no schedules.yaml;"
        " write the schedule there (city: {timezone: Europe/Berlin, slots:"
        ' ["08:30"]}) or give this pipeline one of its own (timezone:, slots:)'
    ]


BROKEN = """\
city:
  timezone: Europe/Berlin
  slots: ["08:30", "8:30"]
night:
  timezone: UTC
  slots: ["22:00"]
  schedule: city
ok:
  timezone: UTC
  slots: ["10:00"]
Bad Name: {timezone: UTC, slots: ["10:00"]}
plain: 5
"""


def test_each_schedule_of_the_file_loads_or_fails_alone(tmp_path: Path) -> None:
    (tmp_path / "schedules.yaml").write_text(BROKEN)
    assert [str(e).replace(f"{tmp_path}/", "") for e in schedules.check(tmp_path)] == [
        "schedules.yaml:3: city.slots: 08:30 listed twice: list each time once",
        "schedules.yaml:7: night.schedule: a schedule here is written out (timezone:,"
        " slots:); it names no other",
        "schedules.yaml:11: invalid schedule name 'Bad Name': use 1 to 64 lowercase"
        " letters, digits, - and _, starting with a letter or digit",
        "schedules.yaml:12: plain: must be a mapping of names to values",
    ]
    ok, errors = _load(tmp_path, "publish: {schedule: ok}\n", name="ok")
    assert errors == [] and ok and ok.publish and ok.publish.resolved.name == "ok"
    _, errors = _load(tmp_path, "publish: {schedule: city}\n", name="ok")
    assert errors == [
        "ok.yaml:8: publish.schedule: schedule 'city' does not load: 1 error(s):\n"
        "  schedules.yaml:3: city.slots: 08:30 listed twice: list each time once"
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            'city: {timezone: UTC, slots: ["08:30"]\n',
            "schedules.yaml:2: invalid YAML: expected ',' or '}', but got '<stream end>'"
            " (parsing a flow mapping that starts on line 1)",
        ),
        (
            "- city\n",
            "schedules.yaml:1: expected a mapping of schedule names to schedules (city:"
            " {timezone: Europe/Berlin, slots: [...]}), got tag:yaml.org,2002:seq",
        ),
    ],
)
def test_a_file_that_is_no_mapping_is_one_error(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "schedules.yaml").write_text(text)
    found = [str(e).replace(f"{tmp_path}/", "") for e in schedules.check(tmp_path)]
    assert found == [error]
    _, errors = _load(tmp_path, "publish: {schedule: city}\n")
    assert errors == [
        f"news.yaml:8: publish.schedule: schedule 'city' does not load: 1 error(s):\n  {error}"
    ]


def test_the_file_is_read_once_for_each_version(tmp_path: Path) -> None:
    assert schedules.check(tmp_path) == [] and not schedules.named(tmp_path).exists
    (tmp_path / "schedules.yaml").write_text(SCHEDULES)
    first = schedules.named(tmp_path)
    assert schedules.named(tmp_path) is first and sorted(first.schedules) == ["city", "night"]
    (tmp_path / "schedules.yaml").write_text(SCHEDULES.replace("night", "late"))
    assert sorted(schedules.named(tmp_path).schedules) == ["city", "late"]
    (tmp_path / "schedules.yaml").write_text("\n")
    assert schedules.named(tmp_path).schedules == {} and schedules.check(tmp_path) == []
