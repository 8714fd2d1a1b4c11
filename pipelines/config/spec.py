"""Pipeline definitions: one YAML file per pipeline in a directory, validated strictly.

    result = spec.load_dir(Path("pipelines"), spec.LoadContext(operators=frozenset({42})))
    for pipeline in result.pipelines.values(): ...
    print(spec.format_errors(result.errors))   # "news.yaml:7: sources.0.type: ..."

One bad file never stops the others, however hostile: a file is read up to
file_errors.MAX_FILE_BYTES, and its YAML nesting and alias expansion are bounded.
Every model forbids unknown fields, so a typo is an error rather than a silently
ignored setting. Every path inside a file is relative to that file, wherever gatehouse
starts (`paths`); `draft.prompt` and a `draft.output_schema` file may not leave
its directory (symlinks are followed): those files are sent to the LLM provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipelines import dispatch, sources
from pipelines.config import file_errors, filters, names, schedules
from pipelines.config import triage as triage_block
from pipelines.config import voice as voice_block
from pipelines.drafting import prompt as drafting
from pipelines.ground import cadence, paths
from pipelines.sources import common
from pipelines.text import validation

ConfigError = file_errors.ConfigError


@dataclass(frozen=True)
class LoadContext:
    """What a pipeline file is checked against beyond itself: the configured operators
    (a quorum must be reachable) and the sources' default byte caps."""

    operators: frozenset[int] = frozenset()
    source_limits: common.Limits = field(default_factory=common.Limits)


def _interval(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f"invalid interval {value!r}: expected {cadence.VALID_INTERVALS}")
    return cadence.parse_interval(value)


def _schedule(value: object) -> cadence.Schedule:
    if isinstance(value, cadence.Schedule):
        return value
    if not isinstance(value, str):
        raise ValueError(f"invalid schedule {value!r}: expected {cadence.VALID_SCHEDULES}")
    return cadence.parse_schedule(value)


def _format_interval(value: timedelta) -> str:
    return f"{int(value.total_seconds())}s"


#: A duration written as "30s", "5m", "1h", "2d" or "1h30m".
Interval = Annotated[timedelta, PlainValidator(_interval), PlainSerializer(_format_interval)]
ScheduleField = Annotated[cadence.Schedule, PlainValidator(_schedule), PlainSerializer(str)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DedupConfig(_Model):
    """How items are remembered and how near-duplicates are gated."""

    #: fetch: an item is seen once fetched; success: only once its run succeeded.
    mark_at: Literal["fetch", "success"] = "fetch"
    #: When the dedup store cannot answer: True drops the item, False lets it through.
    fail_closed: bool = False
    #: How far back the similarity gate looks; 0 turns it off.
    duplicate_window_days: int = Field(default=14, ge=0)


class DraftConfig(_Model):
    """Who writes the draft: the deterministic template drafter or an LLM."""

    drafter: Literal["template", "llm"] = "template"
    #: Prompt template file, relative to the YAML file; required for llm.
    prompt: Path | None = Field(default=None, validate_default=True)
    max_tokens: int = Field(default=512, ge=1)
    #: A JSON Schema the model's output must match: inline, or a .json file path.
    output_schema: dict[str, Any] | None = None
    model: str | None = None

    _prompt_text: str | None = PrivateAttr(default=None)

    @field_validator("prompt", mode="after")
    @classmethod
    def _check_prompt(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            if info.data.get("drafter") == "llm":
                raise ValueError("required when drafter is llm: the path of a prompt file")
            return None
        resolved = _inside(info, value, "prompt file")
        if not resolved.is_file():
            raise ValueError(f"prompt file not found: {resolved}")
        try:
            drafting.check_template(resolved.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read prompt file {resolved}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"prompt file {resolved}: {exc}") from None
        return resolved

    @field_validator("output_schema", mode="before")
    @classmethod
    def _check_schema(cls, value: object, info: ValidationInfo) -> object:
        if value is None:
            return None
        if isinstance(value, str):
            value = _read_json(_inside(info, Path(value), "schema file"))
        if not isinstance(value, dict):
            raise ValueError("must be a JSON Schema mapping or the path of a .json file")
        import jsonschema  # only pipelines with an output schema pay for it

        validator = jsonschema.validators.validator_for(value)
        try:
            validator.check_schema(value)
        except jsonschema.SchemaError as exc:
            where = ".".join(str(part) for part in exc.path)
            raise ValueError(
                f"invalid JSON Schema: {exc.message}" + (f" (at {where})" if where else "")
            ) from None
        validation.check_patterns(value)
        return value

    @model_validator(mode="after")
    def _load_prompt(self) -> DraftConfig:
        if self.prompt is not None:
            self._prompt_text = self.prompt.read_text(encoding="utf-8")
        return self

    @property
    def prompt_text(self) -> str | None:
        """The prompt template as read (and checked) when the config was loaded."""
        return self._prompt_text


#: What Reject offers when a pipeline lists no reasons of its own.
DEFAULT_REJECT_REASONS = ("off-topic", "inaccurate", "tone", "duplicate")


class ApprovalConfig(_Model):
    """Who may decide on a draft, how many must agree, and how long they have."""

    #: Telegram user ids allowed to decide; empty means every configured operator.
    operators: list[int] = Field(default_factory=list)
    quorum: int = Field(default=1, ge=1, validate_default=True)
    window: Interval = timedelta(hours=24)
    #: The reasons Reject offers as buttons (besides "other…", a typed reply).
    reject_reasons: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(
        default_factory=lambda: list(DEFAULT_REJECT_REASONS), max_length=6
    )
    #: How long an approve or a reject can be undone (the dispatch waits); 0s: no undo.
    undo_window: Interval = timedelta(seconds=10)
    #: Four eyes: whoever wrote a version may not approve it (default: on from quorum 2).
    separate_editor: bool | None = None
    #: Remind the approvers once when an item has waited this long.
    remind_after: Interval | None = None
    #: Bring in `escalate_to` once an item has waited this long.
    escalate_after: Interval | None = None
    escalate_to: list[int] = Field(default_factory=list)
    #: How many times an operator may extend one item's window (Extend on the SLA warning).
    max_extensions: int = Field(default=1, ge=0, le=10)
    #: One card per item in this group or supergroup (its id, or its @username), instead
    #: of a card in each operator's private chat. Default: GATEHOUSE_TELEGRAM__CARDS_CHAT.
    chat: int | Annotated[str, Field(pattern=r"^@[A-Za-z][A-Za-z0-9_]{3,31}$")] | None = None
    #: The forum topic for the cards: its message_thread_id, or a name the bot creates once.
    topic: int | Annotated[str, Field(min_length=1, max_length=128)] | None = None
    #: Send one message listing what waits at these times, instead of a card per item.
    digest: ScheduleField | None = None
    _approvers: tuple[int, ...] = PrivateAttr(default=())

    @property
    def four_eyes(self) -> bool:
        return self.separate_editor if self.separate_editor is not None else self.quorum >= 2

    @property
    def approvers(self) -> tuple[int, ...]:
        """Who may decide: the listed operators that are bot operators, else every bot
        operator (known when the file was loaded with them); empty: not known."""
        return self._approvers

    @model_validator(mode="after")
    def _resolve_approvers(self, info: ValidationInfo) -> ApprovalConfig:
        context = info.context if isinstance(info.context, dict) else {}
        configured = set(context.get("operators") or ())
        listed = self.operators
        self._approvers = tuple(
            [o for o in listed if o in configured]
            if listed and configured
            else listed or sorted(configured)
        )
        return self

    @model_validator(mode="after")
    def _escalation_complete(self) -> ApprovalConfig:
        if (self.escalate_after is None) != (not self.escalate_to):
            raise ValueError("escalate_after and escalate_to go together: set both or neither")
        if self.digest is not None and self.digest.kind != "cron":
            raise ValueError('digest must be a 5-field cron expression, like "0 9 * * *"')
        if self.undo_window > timedelta(minutes=10):
            raise ValueError("undo_window must be at most 10m: the dispatch waits for it")
        if isinstance(self.chat, int) and self.chat >= 0:
            raise ValueError(
                f"approval.chat {self.chat} is not a group: a group's id is negative "
                "(-100... for a supergroup); leave it out for cards in private chats"
            )
        if self.topic is not None and self.chat is None:
            raise ValueError("approval.topic needs approval.chat: the forum the topic is in")
        return self

    @field_validator("quorum", mode="after")
    @classmethod
    def _quorum_reachable(cls, value: int, info: ValidationInfo) -> int:
        listed = set(info.data.get("operators") or [])
        context = info.context if isinstance(info.context, dict) else {}
        configured = set(context.get("operators") or ())
        # Only configured operators reach the bot: a listed id outside them never votes.
        may = listed & configured if listed and configured else listed or configured
        if (listed or configured) and value > len(may):
            who = (
                "bot operators (GATEHOUSE_TELEGRAM__OPERATORS)"
                if not listed
                else "approval.operators that are bot operators"
                if configured
                else "approval.operators"
            )
            raise ValueError(
                f"quorum {value} can never be reached: {len(may)} {who} may approve;"
                f" use a quorum from 1 to {len(may)}"
                if may
                else "no operator may approve: none of approval.operators is a bot operator"
                " (GATEHOUSE_TELEGRAM__OPERATORS)"
            )
        return value

    @field_validator("window", mode="after")
    @classmethod
    def _positive_window(cls, value: timedelta) -> timedelta:
        return _positive(value)

    @field_validator("escalate_to", mode="after")
    @classmethod
    def _escalate_to_operators(cls, value: list[int], info: ValidationInfo) -> list[int]:
        context = info.context if isinstance(info.context, dict) else {}
        configured = set(context.get("operators") or ())
        # Only bot operators reach the bot: anyone else could never decide.
        strangers = sorted(set(value) - configured) if configured else []
        if strangers:
            raise ValueError(
                f"{', '.join(map(str, strangers))} not among the bot operators"
                " (GATEHOUSE_TELEGRAM__OPERATORS): they could never decide"
            )
        return value


# An alias, because inside Pipeline the name `sources` is the field.
SourceList = list[sources.SourceConfig]


class Pipeline(_Model):
    """One pipeline: when it runs, what it reads, how it drafts, who approves, where it goes."""

    name: str
    schedule: ScheduleField
    jitter: Interval = timedelta(0)
    misfire_window: Interval = timedelta(hours=1)
    sources: SourceList
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    #: Entries dropped before anything is drafted (pipelines.config.filters); none: all go on.
    filter: filters.FilterConfig | None = None
    #: A cheap model's score of each entry before drafting (pipelines.config.triage); none: all
    #: entries are drafted.
    triage: triage_block.TriageConfig | None = None
    draft: DraftConfig = Field(default_factory=DraftConfig)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    #: The tells its drafts are linted for (pipelines.config.voice); none: the built-in ones.
    voice: voice_block.VoiceConfig | None = None
    #: Where an approved draft goes; the models and behaviour live in pipelines.dispatch.
    dispatch: dispatch.DispatchTarget
    #: When approved posts go out (pipelines.config.schedules); none: once the undo window ends.
    publish: schedules.PublishConfig | None = None

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not names.NAME_RE.fullmatch(value):
            raise ValueError(
                f"invalid name {value!r}: use 1 to 64 lowercase letters, digits, - and _,"
                " starting with a letter or digit"
            )
        return value

    @field_validator("sources", mode="after")
    @classmethod
    def _some_sources(cls, value: SourceList) -> SourceList:
        if not value:
            raise ValueError("at least one source is required")
        return value


@dataclass
class LoadResult:
    """The pipelines that loaded, keyed by name, and every error found on the way."""

    pipelines: dict[str, Pipeline] = field(default_factory=dict)
    errors: list[ConfigError] = field(default_factory=list)
    #: The file each pipeline came from.
    files: dict[str, Path] = field(default_factory=dict)
    #: The files that did not load, by the name they declare (else their file name's
    #: stem), with their errors: what a command naming such a pipeline answers.
    broken: dict[str, list[ConfigError]] = field(default_factory=dict)


def load_dir(path: Path, context: LoadContext | None = None) -> LoadResult:
    """Load every .yaml and .yml file in `path` (sorted; not recursive)."""
    result = LoadResult()
    if not path.is_dir():
        result.errors.append(ConfigError(path, None, None, "not a directory of pipeline files"))
        return result
    for file in names.files(path):
        pipeline, errors = load_file(file, context)
        result.errors.extend(errors)
        if pipeline is None:
            result.broken.setdefault(names.name_in(file) or file.stem, []).extend(errors)
            continue
        if pipeline.name in result.pipelines:
            first = result.files[pipeline.name]
            reason = f"duplicate pipeline name {pipeline.name!r}: already defined in {first}"
            line = file_errors.line_of(file.read_text(encoding="utf-8"), ("name",))
            result.errors.append(ConfigError(file, line, "name", reason))
            continue
        result.pipelines[pipeline.name] = pipeline
        result.files[pipeline.name] = file
    return result


def load_file(
    file: Path, context: LoadContext | None = None
) -> tuple[Pipeline | None, list[ConfigError]]:
    """One pipeline file: the pipeline, or None and the reasons it was rejected."""
    context = context or LoadContext()
    try:
        text = file_errors.read(file)
        node, data = file_errors.parse_yaml(text)
    except file_errors.Problem as problem:
        return None, [ConfigError(file, problem.line, problem.field, problem.reason)]
    checks = {
        paths.BASE_DIR: file.parent.absolute(),
        "operators": context.operators,
        common.LIMITS_CONTEXT: context.source_limits,
    }
    try:
        pipeline = Pipeline.model_validate(data, context=checks)
    except ValidationError as exc:
        errors = [
            file_errors.from_pydantic(file, error, node, data, Pipeline) for error in exc.errors()
        ]
        # Top to bottom, the way an operator reads the file.
        return None, sorted(errors, key=lambda error: error.line or 0)
    return pipeline, []


def check(path: Path, context: LoadContext | None = None) -> list[ConfigError]:
    """Every error in the pipeline directory `path` (empty when all is well)."""
    return load_dir(path, context).errors


def format_errors(errors: list[ConfigError]) -> str:
    """One line per error, `file:line: field: reason`, for the terminal."""
    return "\n".join(str(error) for error in errors)


def _inside(info: ValidationInfo, value: Path, noun: str) -> Path:
    """`value` resolved (symlinks too) against the pipeline file's directory; refused when
    it leaves that directory, since what the file holds is sent to the LLM provider."""
    base = paths.base_dir(info).resolve()
    resolved = (base / value).resolve()
    if not resolved.is_relative_to(base):
        raise ValueError(
            f"{noun} {str(value)!r} resolves to {resolved}, outside the pipelines directory"
            f" {base}: it is sent to the LLM provider, so it must be in that directory or below"
        )
    return resolved


def _read_json(path: Path) -> object:
    resolved = path.resolve()
    try:
        return json.loads(resolved.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"schema file not found: {resolved}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read schema file {resolved}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"schema file {resolved} is not valid JSON: {exc.msg} (line {exc.lineno})"
        ) from None


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be longer than 0s")
    return value
