"""A pipeline's voice: `voice: {profile: voice/city.yaml}`, a file beside the pipeline
file that adds, removes or tunes the tells rules (pipelines.voice), checked strictly.

    rules:                        # rules of your own
      - {name: cliche-city, words: [vibrant city], severity: warn, hint: Name the street.}
      - {name: shouting, regex: '!{2,}', severity: block, hint: One mark at most.}
      - {name: hashtags-0, count: hashtags, max: 0, severity: note, hint: None here.}
    remove: [stock-verbs]         # built-in rules this channel does not mind
    tune:                         # built-in rules made stricter or milder
      em-dashes: {max: 0.5, severity: block}
    builtin: true                 # false: only the rules above

A bad rule is a `file:line: field: reason` of the voice file, reported on the
pipeline's `voice.profile` line (so `gatehouse check` names both files).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipelines.config import file_errors, yaml_file
from pipelines.ground import paths
from pipelines.text import safe_regex
from pipelines.voice import builtin, lint
from pipelines.voice.rules import Metric, Rule, Severity

ConfigError = file_errors.ConfigError
#: The most rules a voice file may add (a real one adds a handful; 200 are benched).
MAX_RULES = 2000
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")  # one character class, repeated: no backtracking
_WHAT = "a mapping of voice fields (rules: ..., remove: ..., tune: ..., builtin: ...)"


def _builtin_name(value: str) -> str:
    if value not in builtin.NAMES:
        raise ValueError(f"unknown built-in rule {value!r}; valid: {', '.join(builtin.NAMES)}")
    return value


def _one_line(value: str) -> str:
    value = value.strip()
    if not value or "\n" in value:
        raise ValueError("must be one line of text, like: Name the street instead.")
    return value


def _rule_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(
            f"invalid rule name {value!r}: 1 to 40 lowercase letters, digits, - and _,"
            " like cliche-city"
        )
    return value


def _words(value: list[str]) -> list[str]:
    words = [word.strip() for word in value]
    if not words or not all(words):
        raise ValueError("must list at least one non-empty word or phrase, like [vibrant city]")
    return words


BuiltinName = Annotated[str, AfterValidator(_builtin_name)]
WordList = Annotated[list[Annotated[str, Field(max_length=200)]], AfterValidator(_words)]
Hint = Annotated[str, Field(max_length=200), AfterValidator(_one_line)]
Label = Annotated[str, Field(max_length=40), AfterValidator(_one_line)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RuleEntry(_Model):
    """One rule of the file's own: words, an RE2 regex, or a count over a `max`."""

    name: Annotated[str, AfterValidator(_rule_name)]
    words: WordList | None = None
    regex: str | None = None
    count: Metric | None = None
    max: float | None = Field(default=None, ge=0)
    severity: Severity = "warn"
    hint: Hint
    label: Label | None = None

    @field_validator("regex", mode="after")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            compiled = safe_regex.compile(value)
        except safe_regex.Unsupported as exc:
            raise ValueError(str(exc)) from None
        if compiled.search("") is not None:
            raise ValueError(f"regex {value!r} matches an empty text: every draft would hit it")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> RuleEntry:
        kinds = [k for k in ("words", "regex", "count") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                "a rule has exactly one of words: [..], regex: '..' (RE2) or count: NAME"
                f" with max: N; this one has {', '.join(kinds) or 'none'}"
            )
        if (self.count is None) != (self.max is None):
            raise ValueError("count and max go together: count: em_dashes, max: 1")
        return self

    def rule(self) -> Rule:
        return Rule(
            self.name, self.severity, self.hint, words=tuple(self.words or ()),
            pattern=self.regex, metric=self.count, limit=self.max, label=self.label,
        )  # fmt: skip


class Tune(_Model):
    """What changes in a built-in rule; what is left out stays."""

    severity: Severity | None = None
    hint: Hint | None = None
    label: Label | None = None
    #: A count rule's limit (em dashes per 100 words, exclamation marks, ...).
    max: float | None = Field(default=None, ge=0)


class VoiceFile(_Model):
    """A voice file: the built-in rules, less `remove`, changed by `tune`, plus `rules`."""

    builtin: bool = True
    remove: list[BuiltinName] = Field(default_factory=list)
    tune: dict[BuiltinName, Tune] = Field(default_factory=dict)
    rules: list[RuleEntry] = Field(default_factory=list, max_length=MAX_RULES)

    def kept(self) -> list[Rule]:
        """The built-in rules this file keeps, as they are built in."""
        if not self.builtin:
            return []
        return [rule for rule in builtin.RULES if rule.name not in self.remove]

    def compiled(self) -> list[Rule]:
        found = []
        for rule in self.kept():
            tune = self.tune.get(rule.name)
            found.append(
                rule.tuned(tune.severity, tune.hint, tune.max, tune.label) if tune else rule
            )
        return found + [entry.rule() for entry in self.rules]


def _cross_checks(parsed: VoiceFile) -> list[tuple[tuple[str | int, ...], str]]:
    """What the fields cannot see alone: names taken twice, tunes of rules not there."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    by_name = {rule.name: rule for rule in builtin.RULES}
    for name, tune in parsed.tune.items():
        if name in parsed.remove or not parsed.builtin:
            problems.append(
                (
                    ("tune", name),
                    f"{name!r} is not kept here (remove, or builtin: false): drop its tune",
                )
            )
        elif tune.max is not None and by_name[name].metric is None:
            counted = ", ".join(rule.name for rule in builtin.RULES if rule.metric)
            problems.append(
                (("tune", name, "max"), f"{name!r} is not a count; max tunes {counted}")
            )
    active = {rule.name for rule in parsed.kept()}
    seen: set[str] = set()
    for number, entry in enumerate(parsed.rules):
        if entry.name in active or entry.name in seen:
            where = "a built-in rule: remove it first, or" if entry.name in active else "taken:"
            problems.append(
                (("rules", number, "name"), f"{entry.name!r} is {where} choose another name")
            )
        seen.add(entry.name)
    return problems


def load(file: Path) -> tuple[VoiceFile | None, list[ConfigError]]:
    """One voice file: what it says, or None and every error with its line."""
    try:
        text = yaml_file.read(file)
        if not text.strip():
            return VoiceFile(), []  # an empty profile: the built-in rules as they are
        node, data = yaml_file.parse_yaml(text, expected=_WHAT)
    except yaml_file.Problem as problem:
        return None, [ConfigError(file, problem.line, problem.field, problem.reason)]
    try:
        parsed = VoiceFile.model_validate(data)
    except ValidationError as exc:
        errors = [_error(file, error, node, data) for error in exc.errors()]
        return None, sorted(errors, key=lambda error: error.line or 0)
    problems = [
        ConfigError(file, file_errors.line_of(text, loc), ".".join(map(str, loc)), reason)
        for loc, reason in _cross_checks(parsed)
    ]
    problems.sort(key=lambda error: error.line or 0)
    return (None, problems) if problems else (parsed, [])


def _error(file: Path, error: Any, node: Any, data: object) -> ConfigError:
    found = file_errors.from_pydantic(file, error, node, data, VoiceFile)
    # A bad key of `tune` is located at its key; pydantic adds a "[key]" step.
    field = found.field.removesuffix(".[key]") if found.field else None
    return ConfigError(found.file, found.line, field, found.reason)


@dataclass(frozen=True)
class Profile:
    """A loaded voice file: where it is, and its rules compiled."""

    file: Path
    rules: lint.Rules


def _profile(value: object, info: ValidationInfo) -> Profile:
    """`voice.profile`: the file beside the pipeline file, loaded and compiled once; its
    errors, one line each, under the pipeline's line (`gatehouse check` shows both)."""
    if isinstance(value, Profile):
        return value
    if not isinstance(value, str | Path) or not str(value):
        raise ValueError("must be the path of a voice file, like voice/city.yaml")
    base = paths.base_dir(info)
    file = base / value
    if not file.resolve().is_relative_to(base.resolve()):
        raise ValueError(f"voice file {str(value)!r} is outside the pipelines directory")
    if not file.is_file():
        raise ValueError(f"voice file not found: {file}")
    parsed, errors = load(file)
    if parsed is None:
        listed = "".join(f"\n  {error}" for error in errors)
        raise ValueError(f"the voice file has {len(errors)} error(s):{listed}")
    return Profile(file, lint.Rules(parsed.compiled()))


ProfileField = Annotated[
    Profile, PlainValidator(_profile), PlainSerializer(lambda profile: str(profile.file))
]


class VoiceConfig(_Model):
    """A pipeline's `voice:` block."""

    #: The voice file, relative to the pipeline file; none: the built-in rules.
    profile: ProfileField | None = None

    @property
    def rules(self) -> lint.Rules:
        """The rules this pipeline's drafts are linted with."""
        return self.profile.rules if self.profile is not None else lint.default_rules()


def rules_of(block: VoiceConfig | None) -> lint.Rules:
    """The rules a pipeline's drafts are linted with: its voice file's, else the built-in."""
    return block.rules if block is not None else lint.default_rules()
