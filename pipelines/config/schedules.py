"""A pipeline's `publish:` block: the schedule its approved posts go out by, in slots.

    publish: {schedule: city-channel}        # a named schedule, from schedules.yaml
    publish:                                 # or one of its own
      timezone: Europe/Berlin                # an IANA name
      slots: ["08:30", "12:00", "17:30"]     # local times, quoted
      days: [mon, tue, wed, thu, fri]        # default: every day
      min_gap: 90m                           # no two posts closer than this (default 0s)
      grace: 15m                             # how late a missed slot may still fire

    pipeline.publish.resolved                # a Schedule, whichever way it was written

Named schedules live in one file beside the pipeline files, `schedules.yaml`
(names.SCHEDULES_FILE): a mapping of names to the form above. It is read once for each
version of the file (`named`); each schedule in it loads or fails alone, and `check` lists
its errors as `file:line: field: reason`, like a pipeline file's. A pipeline naming a
schedule that did not load carries that schedule's errors under its `publish.schedule` line.
When the slots fall, in UTC: pipelines.publishing.times.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import itertools
import re
import zoneinfo
from collections.abc import Mapping
from datetime import time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipelines.config import file_errors, names, timing, yaml_file
from pipelines.ground import paths

ConfigError = file_errors.ConfigError
Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
#: The days in date.weekday() order: "mon" is 0.
DAYS: tuple[str, ...] = get_args(Day)
DEFAULT_GRACE = timedelta(minutes=15)
#: The longest grace and min_gap: a slot missed for longer than a day is not news.
MAX_SPAN = timedelta(days=1)
#: The validation context's key saying an entry of schedules.yaml is being validated.
IN_SCHEDULES_FILE = "in_schedules_file"
#: Keys of the tz database that name no place (the host's own zone, an unset one).
_NO_PLACE = frozenset({"localtime", "posixrules", "Factory"})
_TIME = re.compile(r"(\d{1,2}):(\d{2})")
_ZONE_HINT = "use an IANA name like Europe/Berlin, America/New_York or UTC"
_WHAT = "a mapping of schedule names to schedules (city: {timezone: Europe/Berlin, slots: [...]})"


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A schedule as loaded: its local slots, on which days, in which zone, and its spacing."""

    #: Its name in schedules.yaml; None: a pipeline's own.
    name: str | None
    zone: zoneinfo.ZoneInfo
    #: Local wall-clock times, sorted, each once.
    slots: tuple[time, ...]
    #: date.weekday() numbers (Monday 0).
    days: frozenset[int]
    min_gap: timedelta
    grace: timedelta


def _zone(value: object) -> zoneinfo.ZoneInfo:
    if isinstance(value, zoneinfo.ZoneInfo):
        return value
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a time zone name: {_ZONE_HINT}")
    if value in _NO_PLACE:
        raise ValueError(f"{value!r} names no place (it depends on the host): {_ZONE_HINT}")
    try:
        return zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(_unknown_zone(value)) from None


def _unknown_zone(value: str) -> str:
    if "/" not in value:
        # PST or CEST would find EST or CET close by, a wrong zone: say what a zone is.
        return (
            f"unknown time zone {value!r}: {_ZONE_HINT}; an abbreviation such as PST or CEST"
            " is not a zone (it changes with the season)"
        )
    by_lower = {key.lower(): key for key in zoneinfo.available_timezones()}
    close = difflib.get_close_matches(value.lower(), list(by_lower), n=1)
    if close:
        return f"unknown time zone {value!r}; did you mean {by_lower[close[0]]}?"
    return f"unknown time zone {value!r}: {_ZONE_HINT}"


def _slot(value: object) -> time:
    if isinstance(value, time):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        # YAML 1.1 reads an unquoted 12:00 as 12 * 60 + 0 = 720 (base 60).
        written = f"{value // 60:02d}:{value % 60:02d}"
        _slot(written)
        raise ValueError(
            f'YAML reads an unquoted time as a number (here {value}): quote it, "{written}"'
        )
    if not isinstance(value, str):
        raise ValueError('must be a time of day in quotes, like "08:30"')
    match = _TIME.fullmatch(value.strip())
    if match is None:
        raise ValueError(f'invalid time {value!r}: write hours and minutes, like "08:30"')
    hour, minute = int(match[1]), int(match[2])
    if hour > 23 or minute > 59:
        raise ValueError(
            f'invalid time {value!r}: hours run 00 to 23 and minutes 00 to 59, like "23:30"'
        )
    return time(hour, minute)


def _clock(value: time) -> str:
    return f"{value:%H:%M}"


def _distinct_slots(value: list[time]) -> list[time]:
    if not value:
        raise ValueError(
            'list at least one time, like ["08:30"]; without publish: a post goes at once'
        )
    twice = sorted({_clock(t) for t in value if value.count(t) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} listed twice: list each time once")
    return sorted(value)


def _distinct_days(value: list[Day]) -> list[Day]:
    if not value:
        raise ValueError("days: [] would never post: list a day, or leave days out for every day")
    twice = sorted({day for day in value if value.count(day) > 1}, key=DAYS.index)
    if twice:
        raise ValueError(f"{', '.join(twice)} listed twice: list each day once")
    return value


def _at_most_a_day(value: timedelta) -> timedelta:
    if value > MAX_SPAN:
        raise ValueError(f"must be at most 1d, not {_span(value)}: a slot a day late is no slot")
    return value


def _span(value: timedelta) -> str:
    """A duration as the file writes one: 1h30m, 15m, 0s."""
    seconds = int(value.total_seconds())
    parts = ((seconds // 86400, "d"), (seconds // 3600 % 24, "h"), (seconds // 60 % 60, "m"))
    written = "".join(f"{n}{unit}" for n, unit in (*parts, (seconds % 60, "s")) if n)
    return written or "0s"


Zone = Annotated[zoneinfo.ZoneInfo, PlainValidator(_zone), PlainSerializer(lambda z: z.key)]
SlotTime = Annotated[time, PlainValidator(_slot), PlainSerializer(_clock)]
Duration = Annotated[timing.Interval, AfterValidator(_at_most_a_day), PlainSerializer(_span)]


def _named_schedule(value: object, info: ValidationInfo) -> Schedule:
    """`publish.schedule`: the schedule of that name in the pipelines directory's
    schedules.yaml, or why there is none."""
    if isinstance(value, Schedule):
        return value
    context = info.context if isinstance(info.context, dict) else {}
    if context.get(IN_SCHEDULES_FILE):
        raise ValueError("a schedule here is written out (timezone:, slots:); it names no other")
    if not isinstance(value, str) or not names.NAME_RE.fullmatch(value):
        raise ValueError(f"must be the name of a schedule in {names.SCHEDULES_FILE}, like city")
    return named(paths.base_dir(info)).get(value)


NamedSchedule = Annotated[
    Schedule, PlainValidator(_named_schedule), PlainSerializer(lambda s: s.name)
]


class PublishConfig(BaseModel):
    """A pipeline's `publish:` block (and each schedule of schedules.yaml, `schedule` aside):
    a named schedule, or one written out."""

    model_config = ConfigDict(extra="forbid")

    #: A schedule of schedules.yaml; then none of the fields below.
    schedule: NamedSchedule | None = None
    timezone: Zone | None = None
    slots: list[SlotTime] | None = None
    #: None: every day.
    days: Annotated[list[Day], AfterValidator(_distinct_days)] | None = None
    #: No two posts of the schedule closer than this; None: 0s.
    min_gap: Duration | None = None
    #: How late a missed slot may still fire; None: DEFAULT_GRACE.
    grace: Duration | None = None

    _resolved: Schedule = PrivateAttr()

    @property
    def resolved(self) -> Schedule:
        """The schedule this block publishes by, named or its own (set by validation)."""
        return self._resolved

    @field_validator("slots", mode="after")
    @classmethod
    def _slots(cls, value: list[time] | None) -> list[time] | None:
        return None if value is None else _distinct_slots(value)

    @field_validator("min_gap", mode="after")
    @classmethod
    def _spacing(cls, value: timedelta | None, info: ValidationInfo) -> timedelta | None:
        slots, days = info.data.get("slots"), info.data.get("days")
        if value and slots:
            _check_spacing(slots, {DAYS.index(d) for d in days or DAYS}, value)
        return value

    @model_validator(mode="after")
    def _resolve(self, info: ValidationInfo) -> PublishConfig:
        context = info.context if isinstance(info.context, dict) else {}
        own = {k: v for k, v in self if k != "schedule" and v is not None}
        if self.schedule is not None:
            if own:
                raise ValueError(
                    f"schedule: {self.schedule.name} and {', '.join(own)} together: name a"
                    f" schedule of {names.SCHEDULES_FILE} or write one out here, not both"
                )
            self._resolved = self.schedule
            return self
        if self.timezone is None or self.slots is None:
            raise ValueError(_incomplete(self, bool(context.get(IN_SCHEDULES_FILE))))
        self._resolved = Schedule(
            name=None,
            zone=self.timezone,
            slots=tuple(self.slots),
            days=frozenset(DAYS.index(d) for d in self.days or DAYS),
            min_gap=self.min_gap or timedelta(0),
            grace=DEFAULT_GRACE if self.grace is None else self.grace,
        )
        return self


def _incomplete(block: PublishConfig, in_file: bool) -> str:
    example = 'timezone: Europe/Berlin, slots: ["08:30", "17:30"]'
    if block.timezone is None and block.slots is None and not in_file:
        return (
            f"publish needs schedule: NAME (a schedule of {names.SCHEDULES_FILE}) or a"
            f" schedule of its own: {example}"
        )
    missing = " and ".join(k for k in ("timezone", "slots") if getattr(block, k) is None)
    return f"a schedule needs {missing}: {example}"


def _check_spacing(slots: list[time], days: set[int], min_gap: timedelta) -> None:
    """Refuse slots closer than min_gap: the later one would always wait or expire."""
    pairs = list(itertools.pairwise(slots))
    if any((day + 1) % 7 in days for day in days):  # a day's last slot, then the next day's first
        pairs.append((slots[-1], slots[0]))
    for first, then in pairs:
        minutes = (then.hour - first.hour) * 60 + then.minute - first.minute
        gap = timedelta(minutes=minutes % (24 * 60) or 24 * 60)
        if gap < min_gap:
            raise ValueError(
                f"slots {_clock(first)} and {_clock(then)} are {_span(gap)} apart, closer than"
                f" min_gap {_span(min_gap)}: the later would always wait; space them at least"
                f" {_span(min_gap)} apart or lower min_gap"
            )


#: Said by `gatehouse check` and logged at start for a pipeline with a `publish:` block,
#: until the publishing queue acts on it: its posts go out as without one.
NOT_YET = (
    "publish: is checked but not acted on yet: approved posts go out when the undo window "
    "ends, as without it"
)


@dataclasses.dataclass(frozen=True)
class Named:
    """What schedules.yaml holds: its schedules by name, those that did not load with their
    errors, and every error of the file (for `gatehouse check`)."""

    file: Path
    exists: bool = False
    schedules: Mapping[str, Schedule] = dataclasses.field(default_factory=dict)
    broken: Mapping[str, tuple[ConfigError, ...]] = dataclasses.field(default_factory=dict)
    errors: tuple[ConfigError, ...] = ()

    def get(self, name: str) -> Schedule:
        """The schedule `name`; ValueError says why there is none, and what there is."""
        if name in self.schedules:
            return self.schedules[name]
        errors = self.broken.get(name) or (() if self.schedules or self.broken else self.errors)
        if errors:
            listed = "".join(f"\n  {error}" for error in errors)
            raise ValueError(f"schedule {name!r} does not load: {len(errors)} error(s):{listed}")
        if not self.exists:
            raise ValueError(
                f"unknown schedule {name!r}: there is no {self.file}; write the schedule there"
                ' (city: {timezone: Europe/Berlin, slots: ["08:30"]}) or give this pipeline'
                " one of its own (timezone:, slots:)"
            )
        known = ", ".join(sorted([*self.schedules, *self.broken])) or "none"
        raise ValueError(f"unknown schedule {name!r}; {self.file.name} defines: {known}")


def named(directory: Path) -> Named:
    """The schedules file of `directory`, read once for each version of it."""
    file = directory.absolute() / names.SCHEDULES_FILE
    try:
        info = file.stat()
    except (FileNotFoundError, NotADirectoryError):
        return Named(file)
    except OSError as exc:
        return Named(file, True, errors=(ConfigError(file, None, None, f"cannot read: {exc}"),))
    return _read_once(file, (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))


def check(directory: Path) -> list[ConfigError]:
    """Every error in `directory`'s schedules file, top to bottom (none without a file)."""
    return list(named(directory).errors)


@functools.lru_cache(maxsize=32)
def _read_once(file: Path, stamp: tuple[int, int, int, int]) -> Named:
    """`load`, once per file and stamp (inode, size, mtime, ctime): any change reads it anew."""
    return load(file)


def load(file: Path) -> Named:
    """One schedules file, each schedule loaded or refused alone."""
    try:
        text = yaml_file.read(file)
        if not text.strip():
            return Named(file, True)
        node, data = yaml_file.parse_yaml(text, expected=_WHAT)
    except yaml_file.Problem as problem:
        error = ConfigError(file, problem.line, problem.field, problem.reason)
        return Named(file, True, errors=(error,))
    schedules: dict[str, Schedule] = {}
    broken: dict[str, tuple[ConfigError, ...]] = {}
    for key, value in data.items():
        key_node, value_node = _entry(node, key)
        if not isinstance(key, str) or not names.NAME_RE.fullmatch(key):
            reason = (
                f"invalid schedule name {key!r}: use 1 to 64 lowercase letters, digits, - and _,"
                " starting with a letter or digit"
            )
            broken[str(key)] = (ConfigError(file, key_node.start_mark.line + 1, None, reason),)
            continue
        try:
            entry = PublishConfig.model_validate(value, context={IN_SCHEDULES_FILE: True})
        except ValidationError as exc:
            broken[key] = tuple(_error(file, key, e, value_node, value) for e in exc.errors())
            continue
        schedules[key] = dataclasses.replace(entry.resolved, name=key)
    errors = sorted((e for found in broken.values() for e in found), key=lambda e: e.line or 0)
    return Named(file, True, schedules, broken, tuple(errors))


def _entry(root: yaml.Node, key: object) -> tuple[yaml.Node, yaml.Node]:
    """The key's node and its value's (the root's, for a key a `<<:` merge brought in)."""
    pairs = root.value if isinstance(root, yaml.MappingNode) else []
    return next(((k, v) for k, v in pairs if k.value == str(key)), (root, root))


def _error(file: Path, key: str, error: Any, node: yaml.Node, value: object) -> ConfigError:
    found = file_errors.from_pydantic(file, error, node, value, PublishConfig)
    field = f"{key}.{found.field}" if found.field else key
    return ConfigError(file, found.line, field, found.reason)
