"""What the operator can ask and do, shared by the Telegram handlers and the CLI.

    summary = await operations.overview(store, pipelines, now)       # /status, gatehouse status
    item = await operations.replay(store, operations.Replay(12, "cli"), now)  # /replay 12

Every function returns plain dataclasses (or the store's own frozen rows); rendering
is the caller's business (bot/chat/render.py for Telegram HTML, bot/cli/main.py for a terminal
or JSON). Writes take the actor and `now`, so each one's event says who and when.
A bad argument raises `Invalid`, whose message says what is valid.

Families of actions live in submodules, and the names callers use are importable from
here: `inputs` (checks on ids and pipeline names), `status` (the reads), `dropped` (what
a filter left out), `budget`,
`replays`, `scheduling` (run / pause / resume, sweep), and `review`, the decisions
beyond one tap (a reject's reason, undo, redraft, decisions on a listed set, and the
terminal's approve / reject / edit / redraft). `files` (reconciling file dispatch
folders) is imported by its callers alone: it needs the dispatch models, which a CLI
read such as `gatehouse status` starts faster without.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pipelines.operations import review
from pipelines.operations.budget import (
    MAX_BUDGET_USD,
    budget,
    parse_usd,
    reconcile_claim,
    set_budget,
    settle_uncertain,
)
from pipelines.operations.dropped import (
    FILTERED_SHOWN,
    filtered,
    filtered_today,
    skipped,
    skipped_today,
)
from pipelines.operations.inputs import MAX_ID, Invalid, check_pipeline, whole_number
from pipelines.operations.replays import KeptDraft, Replay, kept_draft, replay
from pipelines.operations.scheduling import (
    MAX_SWEEP_DAYS,
    SCHEDULE_ACTIONS,
    ScheduleAction,
    Scheduling,
    schedule,
    sweep,
)
from pipelines.operations.stats import WINDOWS, Stats, stats, window
from pipelines.operations.status import (
    PENDING_LIMIT,
    RUNS_SHOWN,
    UNCERTAIN_COUNTED,
    History,
    Overview,
    PipelineRuns,
    PipelineStatus,
    audit,
    history,
    overview,
    pending,
    pipeline_runs,
)
from store import items

__all__ = [
    "FILTERED_SHOWN",
    "MAX_BUDGET_USD",
    "MAX_ID",
    "MAX_SWEEP_DAYS",
    "PENDING_LIMIT",
    "RUNS_SHOWN",
    "SCHEDULE_ACTIONS",
    "UNCERTAIN_COUNTED",
    "WINDOWS",
    "History",
    "Invalid",
    "KeptDraft",
    "Overview",
    "PipelineRuns",
    "PipelineStatus",
    "Replay",
    "ScheduleAction",
    "Scheduling",
    "Stats",
    "audit",
    "budget",
    "check_pipeline",
    "filtered",
    "filtered_today",
    "history",
    "kept_draft",
    "overview",
    "parse_usd",
    "pending",
    "pipeline_runs",
    "plain",
    "reconcile_claim",
    "replay",
    "review",
    "schedule",
    "set_budget",
    "settle_uncertain",
    "skipped",
    "skipped_today",
    "stats",
    "sweep",
    "whole_number",
    "window",
]


# -- plain data for --json and the control socket ------------------------------------------


def plain(value: Any) -> Any:
    """Dataclasses, datetimes, enums and paths as JSON-ready values (datetimes in ISO 8601)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, items.Item):
            out["payload"] = value.payload
            del out["payload_json"]
        return out
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    return value
