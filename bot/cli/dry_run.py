"""`gatehouse dry-run`: a pipeline fetched and drafted now, into a throwaway store.

    gatehouse dry-run news [--limit 5] [--llm] [--json]

Drafts at most --limit of the new items, the newest first, and prints each card as it
would look; nothing is marked seen, stored or sent. With --llm,
LLM drafts are real provider calls through the budget ledger (pipelines/runs/trial.py), and
what the provider billed is then counted against the store's budgets: one settled claim,
through the running bot's control socket when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot import settings as settings_mod
from bot.cli import output as cli_output
from bot.cli import writes as cli_writes
from pipelines import operations
from store import db, errors, ledger
from store.backends import datadir
from store.ledger import settle as ledger_settle

if TYPE_CHECKING:  # the engine and the LLM client load for this command alone, when it runs
    from pipelines.config import spec
    from pipelines.runs import trial

#: How the CLI reads the store: `read(cfg, fn)` with a read-only store.
Read = Callable[[settings_mod.Settings, Callable[[db.Store], Awaitable[Any]]], Any]


def add_arguments(parser: argparse.ArgumentParser, positive: Callable[[str], int]) -> None:
    """`positive`: the CLI's argument type for a whole number of at least 1."""
    parser.add_argument("pipeline", help="the pipeline's name, as `gatehouse status` lists it")
    parser.add_argument(
        "--limit",
        type=positive,
        default=5,
        metavar="N",
        help="draft at most N new items, the newest first; the rest are counted, not drafted"
        " (default: %(default)s)",
    )
    parser.add_argument(
        "--llm",
        action="store_true",
        help="draft LLM pipelines with their provider, through the budget ledger: this "
        "costs money, at most what the budgets have left (default: the template, free)",
    )


def run(
    cfg: settings_mod.Settings,
    args: argparse.Namespace,
    now: datetime,
    loaded: spec.LoadResult,
    read: Read,
) -> int:
    """Fetch and draft one pipeline of `loaded` into a throwaway store; print the cards it
    would send (a pipeline whose file failed to load is refused with its errors)."""
    found = loaded.pipelines
    name = operations.check_pipeline(args.pipeline, found, loaded.broken)
    llm = _llm(cfg, found[name], now, read) if args.llm else None
    report = asyncio.run(_run(found[name], now, llm, args.limit))
    counted = _count_spend(cfg, report, now) if report.spent_micros else None
    value = {
        "pipeline": name,
        "fetched": report.fetched,
        "new": report.new,
        "errors": report.errors,
        "cards": [payload for _, payload in report.cards],
        "undrafted": report.undrafted,
        "filtered": report.filtered,
        "verdicts": [
            {"title": v.title, "verdict": "filtered" if v.rule else "kept", "rule": v.rule}
            for v in report.verdicts
        ],
        "failed": [{"item": item, "reason": reason} for item, reason in report.failed],
        "llm": None
        if report.spend is None
        else {
            "drafts": report.llm_drafts,
            # Every call through the ledger: the drafts and the others (a triage's).
            "calls": report.llm_calls,
            "draft_micros": report.draft_micros,
            "spent_micros": report.spent_micros,
            "uncertain_micros": report.uncertain_micros,
            "counted": counted,
        },
    }
    has_filter, triaged = found[name].filter is not None, found[name].triage is not None
    cli_output.emit(
        args,
        value,
        lambda: cli_output.dry_run(
            report, args.limit, counted, filtered=has_filter, triaged=triaged
        ),
    )
    not_counted = counted is not None and counted["claim"] is None
    return 1 if report.errors or report.failed or not_counted else 0


def _count_spend(cfg: settings_mod.Settings, report: trial.Report, now: datetime) -> dict[str, Any]:
    """Count the dry run's LLM spend against the store's budgets (the provider billed it):
    {"claim": id} or {"claim": None, "problem": why not}."""
    requests = ", ".join(report.request_ids) or "none reported"
    evidence = f"dry run of {report.pipeline}: {report.llm_drafts} draft(s); requests {requests}"
    evidence = evidence[: ledger_settle.MAX_EVIDENCE]
    key = f"dry-run:{report.pipeline}:{now.isoformat()}"
    request = {
        "pipeline": report.pipeline,
        "key": key,
        "micros": report.spent_micros,
        "input_tokens": report.usage[0],
        "output_tokens": report.usage[1],
        "evidence": evidence,
    }

    def local(store: db.Store) -> Awaitable[ledger.Claim | None]:
        spent = ledger.Actual(report.spent_micros, evidence, report.usage)
        return ledger.charge(store, key, report.pipeline, spent, now)

    try:
        found = operations.plain(cli_writes.write(cfg, "record-spend", request, local))
    except (operations.Invalid, errors.BudgetExceeded, cli_writes.Refused) as exc:
        return {"claim": None, "problem": str(exc)}
    if not found:
        return {"claim": None, "problem": "no budget covers this pipeline any more"}
    return {"claim": found["id"]}


class NoLlm(ValueError):
    """`--llm` asked for drafts the settings cannot pay for or reach."""


def _llm(
    cfg: settings_mod.Settings, pipeline: spec.Pipeline, now: datetime, read: Read
) -> trial.Llm:
    """The provider and prices of these settings, and what the store's budgets for this
    pipeline and global have left (none: the drafts fall back to the template).

    Refuses, as `check` reports it, what would make every draft fall back to the
    template: asked for the LLM, a silent template run would read as a success."""
    from pipelines.drafting import choice

    name = pipeline.name
    if pipeline.draft.drafter != "llm":
        raise NoLlm(f"--llm: pipeline {name!r} drafts with the template (draft.drafter)")
    why = choice.fallback_reason(pipeline, cfg.llm, cfg.prices)
    if why is not None:
        raise NoLlm(f"--llm: {why}; nothing was drafted (`gatehouse check` lists the rest)")
    left: list[tuple[str, str, int]] = []
    if (cfg.data_dir / datadir.DB_NAME).exists():
        report = read(cfg, lambda store: operations.budget(store, now))
        left = [
            (b.scope, b.period, b.remaining_micros)
            for b in report.budgets
            if b.scope in ("global", name)
        ]
    if not left:
        raise NoLlm(
            f"--llm: no budget covers {name!r}; set one with `gatehouse set-budget {name} "
            "day 5` (or scope global); nothing was drafted"
        )
    from pipelines.runs import trial

    return trial.Llm(cfg.llm, cfg.prices, left)


async def _run(
    pipeline: spec.Pipeline, now: datetime, llm: trial.Llm | None, limit: int
) -> trial.Report:
    import httpx  # the engine's client, for this command alone

    from pipelines.ground import httpclient
    from pipelines.runs import engine, trial

    # The report says each source that failed: the engine's log line would say it again.
    said = _Unless(engine.SOURCE_FAILED)
    logging.getLogger(engine.__name__).addFilter(said)
    try:
        async with httpclient.fetching(timeout=httpx.Timeout(30.0, connect=10.0)) as client:
            return await trial.run(pipeline, client, now, llm, limit=limit)
    finally:
        logging.getLogger(engine.__name__).removeFilter(said)


class _Unless(logging.Filter):
    """Drops the log records of one message (its format string)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != self.message
