"""What the operator can ask and do, shared by the Telegram handlers and the CLI.

    summary = await operations.overview(store, pipelines, now)       # /status, gatehouse status
    item = await operations.replay(store, 12, "cli", now)            # /replay, gatehouse replay 12

Every function returns plain dataclasses (or the store's own frozen rows); rendering
is the caller's business (bot/render.py for Telegram HTML, bot/cli/main.py for a terminal
or JSON). Writes take the actor and `now`, so each one's event says who and when.
A bad argument raises `Invalid`, whose message says what is valid.

Families of actions live in submodules: `operations.review` holds the decisions beyond
one tap (a reject's reason, undo, redraft, decisions on a listed set, and the
terminal's approve / reject / edit / redraft).
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pipelines import config, dispatch, workers
from pipelines.dispatch import file as dispatch_file
from pipelines.operations import review
from store import (
    backend,
    drafts,
    errors,
    events,
    items,
    ledger,
    machine,
    outbox,
    payloads,
    runs,
    schedules,
    seen,
    writer,
)
from store.db import Store
from store.ledger import budgets
from store.ledger import outputs as llm_outputs
from store.ledger import reporting as ledger_report
from store.ledger import settle as ledger_settle
from store.machine import State

if TYPE_CHECKING:  # the CLI reads operations without loading the engine
    from pipelines.scheduler import Scheduler

#: Items /pending and `gatehouse pending` list at most (oldest first).
PENDING_LIMIT = 50
#: Uncertain holds /status counts at most (the /budget reply lists them).
UNCERTAIN_COUNTED = 50
#: Runs /status <pipeline> and `gatehouse runs` show by default.
RUNS_SHOWN = 10
#: The largest budget one command may set (USD): a typo guard, not a policy.
MAX_BUDGET_USD = Decimal(1_000_000)

ScheduleAction = Literal["run", "pause", "resume"]
SCHEDULE_ACTIONS: tuple[ScheduleAction, ...] = ("run", "pause", "resume")


#: The largest row id SQLite stores (a signed 64-bit integer); item and claim ids are below.
MAX_ID = 2**63 - 1
#: The longest `sweep --days` (a century): further back than any seen id can be.
MAX_SWEEP_DAYS = 36_500


class Invalid(errors.Refused, ValueError):
    """An argument is not valid; the message says what is."""


def whole_number(value: object, what: str, low: int = 1, high: int = MAX_ID) -> int:
    """`value` (text such as "12" or "#12", or a JSON integer) as an int from `low` to
    `high`; Invalid otherwise. Only ASCII digits count: str.isdigit() also accepts "²",
    which int() refuses."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        text = value.strip().removeprefix("#")
        if text.isascii() and text.isdigit() and len(text) <= len(str(high)):
            number = int(text)
    if number is None or not low <= number <= high:
        shown = repr(value)[:24]
        raise Invalid(f"{what} must be a whole number from {low} to {high}, not {shown}")
    return number


# -- reads ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PipelineStatus:
    name: str
    paused: bool
    next_due_at: datetime | None
    last_run: runs.Run | None
    awaiting: int
    breaches: int


@dataclass(frozen=True)
class Overview:
    at: datetime
    pipelines: list[PipelineStatus]
    wal_bytes: int
    #: The writer's current storage fault (disk full, I/O error); None while writes succeed.
    storage: writer.StorageFault | None = None
    #: The running process's supervised workers (empty when asked from another process).
    worker_states: Sequence[workers.State] = ()
    #: AI spend holds waiting for an operator's settlement (at most UNCERTAIN_COUNTED).
    uncertain_holds: int = 0

    @property
    def workers_down(self) -> list[workers.State]:
        return [w for w in self.worker_states if not w.running]


async def overview(
    store: Store,
    pipelines: Collection[str],
    now: datetime,
    worker_states: Sequence[workers.State] = (),
) -> Overview:
    """Every configured pipeline: last run, next due, paused, awaiting and breached items."""
    states = await schedules.all_states(store)
    counts = await items.counts(store, pipelines, (State.AWAITING_APPROVAL, State.BREACH))
    rows = []
    for name in sorted(pipelines):
        state = states.get(name)
        last = await runs.recent_runs(store, name, 1)
        by_state = counts.get(name, {})
        rows.append(
            PipelineStatus(
                name=name,
                paused=state.paused if state else False,
                next_due_at=state.next_due_at if state else None,
                last_run=last[0] if last else None,
                awaiting=by_state.get(State.AWAITING_APPROVAL, 0),
                breaches=by_state.get(State.BREACH, 0),
            )
        )
    uncertain = len(await ledger_report.uncertain(store, UNCERTAIN_COUNTED))
    return Overview(
        now, rows, store.wal_bytes(), store.faults.current, worker_states, uncertain_holds=uncertain
    )


@dataclass(frozen=True)
class PipelineRuns:
    name: str
    recent: list[runs.Run]
    #: The last green run and the first red one after it: where to start looking.
    window: runs.Window


async def pipeline_runs(store: Store, name: str, n: int = RUNS_SHOWN) -> PipelineRuns:
    """One pipeline's last n runs (newest first) and its investigation window."""
    if n < 1:
        raise Invalid(f"the number of runs must be at least 1, not {n}")
    return PipelineRuns(
        name, await runs.recent_runs(store, name, n), await runs.investigation_window(store, name)
    )


async def pending(store: Store, limit: int = PENDING_LIMIT) -> list[items.Item]:
    """Items awaiting approval, the longest-waiting first."""
    return await items.in_state(store, State.AWAITING_APPROVAL, limit=limit)


@dataclass(frozen=True)
class History:
    item: items.Item
    events: list[events.Event]

    @property
    def dropped(self) -> bool:
        return self.item.state in machine.DROPPED


async def history(store: Store, item_id: int) -> History:
    """The item and its events, oldest first; NotFound for an unknown id."""
    item = await items.get(store, item_id)
    return History(item, await events.for_entity(store, "item", item_id))


async def budget(store: Store, now: datetime) -> ledger.Report:
    """Limits, spend, holds and uncertain holds, today and this month, in one snapshot."""
    return await ledger.report(store, now)


async def audit(store: Store) -> events.ChainReport:
    """Recompute the event hash chain; the first broken link, if any, is named."""
    return await events.verify_chain(store)


# -- writes -----------------------------------------------------------------------------


async def replay(
    store: Store,
    item_id: int,
    actor: str,
    now: datetime,
    *,
    force: bool = False,
    fresh: bool = False,
    scheduler: Scheduler | None = None,
) -> items.Item:
    """Bring a dropped item back to new (attempt + 1) and ask its pipeline to run.

    An LLM output the provider already gave for this item and no card showed is drafted
    again without a new provider call; `fresh` refuses it (in the same transaction), so
    the new attempt pays for a new draft. The run request is persisted, so without a
    running scheduler (the CLI writing directly) the bot drafts the item at its next start.
    """
    reason = f"replayed by {actor}" + (" with a fresh draft" if fresh else "")

    def unit(conn: backend.Conn) -> items.Item:
        replayed = items.replay_sync(conn, item_id, actor, now, reason, force=force)
        if fresh:
            llm_outputs.refuse_unshown_sync(conn, item_id, f"a fresh draft was asked ({reason})")
        return replayed

    replayed = await store.write(unit)
    await review.ask_run(store, replayed.pipeline, now, scheduler)
    return replayed


async def unshown_drafts(store: Store, item_id: int) -> list[int]:
    """Budget claims whose LLM output for this item no card showed: a replay shows it
    without a new provider call, unless the operator asks for a fresh draft."""
    return await llm_outputs.unshown(store, item_id)


def parse_usd(amount: str) -> int:
    """A dollar amount ("12", "12.50", "$0.25") as integer micros; Invalid otherwise."""
    text = amount.strip().removeprefix("$").replace(",", "")
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise Invalid(f"amount {amount!r} is not a number; give USD like 25 or 12.50") from None
    if not value.is_finite() or value < 0 or value > MAX_BUDGET_USD:
        raise Invalid(f"amount {amount!r} must be between 0 and {MAX_BUDGET_USD:,} USD")
    micros = value * 1_000_000
    if micros != micros.to_integral_value():
        raise Invalid(f"amount {amount!r} has more than 6 decimal places")
    return int(micros)


async def set_budget(
    store: Store, scope: str, period: str, amount_usd: str, actor: str, now: datetime
) -> budgets.Budget:
    """Set a scope's day or month limit (an event with the actor); returns the current row."""
    try:
        budgets.check_scope(scope)
        budgets.check_period(period)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    return await ledger.set_budget(store, scope, period, parse_usd(amount_usd), actor, now)


async def reconcile_claim(
    store: Store, claim_id: int, amount_usd: str, evidence: str, actor: str, now: datetime
) -> ledger_settle.Settlement:
    """Settle an uncertain claim at the figure the provider's evidence shows.

    An item held in drafting by this claim is then failed (so it can be replayed) by
    its pipeline's next tick, which is asked for now.
    """
    if not evidence.strip():
        raise Invalid("evidence is required: e.g. the provider's request id or invoice line")
    settled = await ledger.reconcile(store, claim_id, parse_usd(amount_usd), evidence, actor, now)
    held = settled.claim.item_id
    if held is not None and (await items.get(store, held)).state == State.DRAFTING:
        await schedules.request_run(store, settled.claim.pipeline, now)
    return settled


def check_pipeline(name: str, known: Collection[str]) -> str:
    """`name` if it is configured; Invalid with close matches and the valid names otherwise."""
    if name in known:
        return name
    close = difflib.get_close_matches(name, sorted(known), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    valid = ", ".join(sorted(known)) or "none configured"
    raise Invalid(f"unknown pipeline {name!r}.{hint} Pipelines: {valid}")


async def schedule(
    store: Store,
    known: Collection[str],
    action: str,
    name: str,
    actor: str,
    now: datetime,
    *,
    scheduler: Scheduler | None = None,
) -> bool:
    """run / pause / resume a pipeline; False when pause or resume changed nothing."""
    check_pipeline(name, known)
    if action == "run":
        if scheduler is not None:
            await scheduler.trigger(name, now)
        else:
            await schedules.request_run(store, name, now)
        return True
    if action not in ("pause", "resume"):
        raise Invalid(f"unknown action {action!r}; valid: {', '.join(SCHEDULE_ACTIONS)}")
    paused = action == "pause"
    if scheduler is not None:
        act = scheduler.pause if paused else scheduler.resume
        return await act(name, actor, now)
    return await schedules.set_paused(store, name, paused, actor, now)


async def sweep(
    store: Store,
    now: datetime,
    days: int = seen.DEFAULT_TTL.days,
    progress: Callable[[str, str, int], None] | None = None,
) -> int:
    """Forget seen ids older than `days` (bounded batches); returns how many were deleted."""
    if not 1 <= days <= MAX_SWEEP_DAYS:
        raise Invalid(f"--days must be from 1 to {MAX_SWEEP_DAYS}, not {days}")
    return await seen.sweep(store, now, timedelta(days=days), progress=progress)


# -- reconcile file dispatch targets with the store -------------------------------------


@dataclass
class FolderReport:
    """One dispatch folder compared with the store's dispatch rows for it."""

    folder: Path
    pipelines: list[str]
    expected: int
    #: Files present that the store never dispatched there.
    orphans: list[dispatch_file.OrphanFile] = field(default_factory=list)
    #: Files the store dispatched there that are missing.
    ghosts: list[str] = field(default_factory=list)
    backfilled: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    #: Orphans without gatehouse's front matter: never pruned, someone else wrote them.
    foreign: list[str] = field(default_factory=list)

    @classmethod
    def from_plain(cls, found: dict[str, Any]) -> FolderReport:
        """A report as `plain` sent it (the running bot's answer to reconcile)."""
        orphans = [dispatch_file.OrphanFile(**orphan) for orphan in found["orphans"]]
        return cls(**{**found, "folder": Path(found["folder"]), "orphans": orphans})


@dataclass(frozen=True)
class _Row:
    pipeline: str
    item_id: int
    attempt: int
    version: int
    sent: bool


def _dispatch_row(row: outbox.Row) -> _Row:
    job = payloads.Dispatch.of(row)
    return _Row(row.target, job.item_id, job.attempt, job.version, row.state == "sent")


def _folders(pipelines: Mapping[str, config.Pipeline]) -> dict[Path, list[str]]:
    folders: dict[Path, list[str]] = {}
    for name, pipeline in sorted(pipelines.items()):
        if isinstance(pipeline.dispatch, dispatch.FileTarget):
            folders.setdefault(pipeline.dispatch.path.absolute(), []).append(name)
    return folders


async def reconcile(
    store: Store,
    pipelines: Mapping[str, config.Pipeline],
    *,
    backfill: bool = False,
    prune: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[FolderReport]:
    """Compare each file dispatch folder with the store; optionally rewrite or remove files.

    backfill rewrites a missing file from its approved draft (same name and content as
    the original delivery); prune deletes orphans written by gatehouse (front matter with
    its idempotency key) and leaves every other file alone.
    """
    rows = [_dispatch_row(row) for row in await outbox.dispatches(store)]
    reports = []
    for folder, names in _folders(pipelines).items():
        mine = [row for row in rows if row.pipeline in names]
        expected = {_name(r): r for r in mine if r.sent}
        in_flight = {_name(r) for r in mine if not r.sent}
        found = dispatch_file.reconcile_files(folder, {n: r.item_id for n, r in expected.items()})
        report = FolderReport(folder, names, len(expected), ghosts=list(found.ghosts))
        report.orphans = [o for o in found.orphans if o.name not in in_flight]
        if progress:
            progress(f"{folder}: {len(report.orphans)} orphans, {len(report.ghosts)} ghosts")
        if backfill:
            for name in report.ghosts:
                await _backfill(store, folder / name, expected[name])
                report.backfilled.append(name)
                if progress:
                    progress(f"backfilled {folder / name}")
        for orphan in report.orphans:
            if not (orphan.idempotency_key or "").startswith("gh-"):
                report.foreign.append(orphan.name)
            elif prune:
                (folder / orphan.name).unlink(missing_ok=True)
                report.pruned.append(orphan.name)
                if progress:
                    progress(f"pruned {folder / orphan.name}")
        reports.append(report)
    return reports


def _name(row: _Row) -> str:
    return dispatch_file.file_name(row.pipeline, row.item_id, row.version)


async def _backfill(store: Store, path: Path, row: _Row) -> None:
    item = await items.get(store, row.item_id)
    draft = await drafts.get(store, row.item_id, row.version)
    delivery = dispatch.Delivery.of(item, draft, row.attempt)
    data = dispatch_file.render(delivery).encode()
    await asyncio.to_thread(dispatch_file.write_atomic, path, data)


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
