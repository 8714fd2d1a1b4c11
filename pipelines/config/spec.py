"""Pipeline definitions: one YAML file per pipeline in a directory, validated strictly.

    result = spec.load_dir(Path("pipelines"), spec.LoadContext(operators=frozenset({42})))
    for pipeline in result.pipelines.values(): ...
    print(spec.format_errors(result.errors))   # "news.yaml:7: sources.0.type: ..."

One bad file never stops the others, however hostile: a file is read up to
yaml_file.MAX_FILE_BYTES, and its YAML nesting and alias expansion are bounded.
Every model forbids unknown fields, so a typo is an error rather than a silently
ignored setting. Every path inside a file is relative to that file, wherever gatehouse
starts (`paths`). Each block with rules of its own has a module of its own beside this
one (`draft`, `approval`, `filters`, `triage`, `voice`); this one holds the field list.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pipelines import dispatch, sources
from pipelines.config import approval as approval_block
from pipelines.config import draft as draft_block
from pipelines.config import file_errors, filters, names, schedules, timing, yaml_file
from pipelines.config import triage as triage_block
from pipelines.config import voice as voice_block
from pipelines.ground import paths
from pipelines.sources import common

ConfigError = file_errors.ConfigError
# The type pipelines.approval reads a pipeline's approval rules as.
ApprovalConfig = approval_block.ApprovalConfig


@dataclass(frozen=True)
class LoadContext:
    """What a pipeline file is checked against beyond itself: the configured operators
    (a quorum must be reachable) and the sources' default byte caps."""

    operators: frozenset[int] = frozenset()
    source_limits: common.Limits = field(default_factory=common.Limits)


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


# An alias, because inside Pipeline the name `sources` is the field.
SourceList = list[sources.SourceConfig]


class Pipeline(_Model):
    """One pipeline: when it runs, what it reads, how it drafts, who approves, where it goes."""

    name: str
    schedule: timing.ScheduleField
    jitter: timing.Interval = timedelta(0)
    misfire_window: timing.Interval = timedelta(hours=1)
    sources: SourceList
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    #: Entries dropped before anything is drafted (pipelines.config.filters); none: all go on.
    filter: filters.FilterConfig | None = None
    #: A cheap model's score of each entry before drafting (pipelines.config.triage); none: all
    #: entries are drafted.
    triage: triage_block.TriageConfig | None = None
    draft: draft_block.DraftConfig = Field(default_factory=draft_block.DraftConfig)
    approval: approval_block.ApprovalConfig = Field(default_factory=approval_block.ApprovalConfig)
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
        text = yaml_file.read(file)
        node, data = yaml_file.parse_yaml(text)
    except yaml_file.Problem as problem:
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
