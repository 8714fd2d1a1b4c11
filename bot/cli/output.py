"""What the CLI prints: pipelines.operations results as aligned plain-text tables for a terminal.

Pure functions from view dataclasses to text; `now` is passed in. `--json` output does
not come through here: it is `operations.plain(...)` dumped as JSON.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.chat import card_text, people, render, wording
from bot.ground import storage_alarm
from pipelines import operations
from pipelines.text import visible
from store import items, ledger, units
from store.audit import events
from store.backends import backup as store_backup
from store.intake import runs
from store.ledger import budgets
from store.reports import info

if TYPE_CHECKING:
    from pipelines.operations import files
    from pipelines.runs import trial


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(_is_number(r[i]) for r in rows) and bool(rows) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if num else cell.ljust(width)
            for cell, width, num in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _run_cell(run: runs.Run | None, now: datetime) -> str:
    if run is None:
        return "none yet"
    return f"#{run.id} {run.status} {render.age(run.started_at, now)}"


def status(
    overview: operations.Overview,
    summary: info.Info,
    writer_pid: int | None,
    now: datetime,
    verbose: bool = False,
) -> str:
    rows = [
        (
            p.name,
            "no file" if not p.has_file else "paused" if p.paused else "active",
            _run_cell(p.last_run, now),
            ""
            if p.paused or not p.has_file
            else render.age(p.next_due_at, now)
            if p.next_due_at
            else "not scheduled",
            p.awaiting,
            p.breaches,
        )
        for p in overview.pipelines
    ]
    body = table(("pipeline", "state", "last run", "next due", "awaiting", "breaches"), rows)
    writer = f"running as pid {writer_pid}" if writer_pid else "not running"
    gone = [render.no_file_note(p) for p in overview.pipelines if not p.has_file]
    return "\n".join(
        [
            body if rows else "no pipelines configured",
            *gone,
            "",
            f"store   {summary.path} (schema version {summary.schema_version})",
            *([f"wal     {overview.wal_bytes / 1024:.0f} KiB"] if verbose else []),
            f"bot     {writer}",
            *([f"disk    {storage_alarm.describe(overview.storage)}"] if overview.storage else []),
            *(f"model   {render.pace_line(m)}" for m in overview.models),
        ]
    )


def pipeline_runs(found: operations.PipelineRuns, now: datetime) -> str:
    rows = [
        (
            f"#{r.id}",
            r.trigger,
            r.status,
            render.when(r.started_at),
            render.duration(r.ended_at - r.started_at) if r.ended_at else "",
            r.counts.fetched,
            r.counts.new,
            r.counts.filtered,
            r.counts.skipped,
            r.counts.drafted,
            r.counts.failed,
            (r.error_text or "")[:60],
        )
        for r in found.recent
    ]
    head = "run trigger status started took fetched new filtered skipped drafted failed error"
    lines = [f"{found.name}: last {len(rows)} runs, newest first"]
    lines.append(table(head.split(), rows) if rows else "  no runs yet")
    return "\n".join(lines + render.where_to_look(found, now, chat=False))


def pending(waiting: Sequence[items.Item], now: datetime) -> str:
    if not waiting:
        return "Nothing is awaiting approval."
    rows = [
        (
            item.id,
            item.pipeline,
            f"v{item.version}",
            render.age(item.last_transition_at, now).removesuffix(" ago"),
            str(item.payload.get("title") or item.source_id)[:60],
        )
        for item in waiting
    ]
    return table(("item", "pipeline", "version", "waiting", "title"), rows)


def filtered(name: str, found: Sequence[items.Item], now: datetime) -> str:
    """A pipeline's filtered entries, the most recent first, each with its rule."""
    return _dropped(name, found, now, ("filtered", "rule"), "back past the filter")


def skipped(name: str, found: Sequence[items.Item], now: datetime) -> str:
    """A pipeline's skipped entries, the most recent first, each with the triage's verdict."""
    return _dropped(name, found, now, ("skipped", "triage"), "to a card past triage")


def _dropped(
    name: str, found: Sequence[items.Item], now: datetime, words: tuple[str, str], back: str
) -> str:
    state, why = words
    if not found:
        return f"Nothing of {name} was {state} (or every {state} entry was replayed)."
    rows = [
        (
            item.id,
            render.age(item.last_transition_at, now),
            str(item.payload.get("title") or item.source_id)[:50],
            item.reason or "no reason recorded",
        )
        for item in found
    ]
    text = table(("item", state, "title", why), rows)
    return text + f"\nbring one {back} with: gatehouse replay <item>"


def stats(found: Sequence[operations.Stats], days: int) -> str:
    """Each pipeline's numbers over the window, one table row per pipeline."""
    if not found:
        return "No pipelines."
    rows = [
        (
            s.pipeline,
            s.entries,
            s.filtered,
            s.skipped,
            s.carded,
            s.approved,
            s.rejected,
            s.expired,
            s.undone,
            "n/a" if s.approval_rate is None else f"{s.approval_rate:.0%}",
            render.wait(s.median_wait_s),
            render.wait(s.p90_wait_s),
            render.usd(s.spend_micros),
            render.usd(s.spend_per_approved_micros),
        )
        for s in found
    ]
    words = "pipeline entries filtered skipped carded approved rejected expired undone rate"
    headers = (*words.split(), "median", "p90", "spend", "per approved")
    lines = [f"last {days} days", table(headers, rows)]
    for s in found:
        if s.reject_reasons:
            reasons = ", ".join(f"{why} ({n})" for why, n in s.reject_reasons)
            lines.append(f"{s.pipeline}: top reject reasons: {reasons}")
    return "\n".join(lines)


def history(found: operations.History, names: dict[int, str] | None = None) -> str:
    """An item's events; `names` (user id to label) names the operators who acted."""
    item = found.item
    head = f"item {item.id} ({item.pipeline}): {item.state}, attempt {item.attempt}"
    rows = [_event_row(e, names or {}) for e in found.events]
    lines = table(("event", "at", "from", "to", "by", "attempt", "reason"), rows).split("\n")
    # Each day's date once, as a heading above its first row; the rows say the time.
    days = render.by_day(found.events)
    first = 1
    for day, happened in days:
        lines.insert(first, f"{day} (UTC)")
        first += len(happened) + 1
    text = head + "\n" + "\n".join(lines)
    if found.dropped:
        why = people.replace(item.reason or "no reason recorded", names or {})
        text += f"\n\ndropped: {item.state}, {why}"
        text += f"\nreplay it with: gatehouse replay {item.id}"
    return text


def _event_row(e: events.Event, names: dict[int, str]) -> tuple[object, ...]:
    actor, reason = people.replace(e.actor, names), people.replace(render.own_words(e), names)
    return (e.id, units.clock(e.at), e.from_state or "·", e.to_state, actor, e.attempt, reason[:70])


def budget(report: ledger.Report, now: datetime) -> str:
    if not report.budgets:
        lines = ["No budgets configured: LLM drafting is off; the template drafter runs."]
    else:
        rows = [
            (
                b.scope,
                b.period,
                render.usd(b.spent_micros),
                render.usd(b.held_micros),
                render.usd(b.remaining_micros),
                render.usd(b.limit_micros),
                f"{b.pct_used:.0f}%",
            )
            for b in sorted(report.budgets, key=lambda b: (b.scope, b.period))
        ]
        lines = [table(("scope", "period", "spent", "held", "remaining", "limit", "used"), rows)]
        if any(render.exact_detail(b) for b in report.budgets):
            lines.append("(rounded: gatehouse budget --json gives each amount in micro-dollars)")
    if report.uncertain:
        count = wording.plural(len(report.uncertain), "uncertain hold")
        lines.append(f"\n{count} (settle: gatehouse reconcile-claim --uncertain or <claim>):")
        holds = [
            (
                h.claim_id,
                h.pipeline,
                h.item_id,
                render.usd_exact(h.reserved_micros),
                render.age(h.since, now),
                h.reason or "",
            )
            for h in report.uncertain
        ]
        lines.append(table(("claim", "pipeline", "item", "reserved", "since", "reason"), holds))
    else:
        lines.append("no uncertain holds")
    return "\n".join(lines)


def budget_set(b: budgets.Budget) -> str:
    return (
        f"budget {b.scope}/{b.period} set to {render.usd_exact(b.limit_micros)} "
        f"(spent {render.usd(b.spent_micros)}, held {render.usd(b.held_micros)} this period)"
    )


def audit(report: events.ChainReport) -> str:
    if report.broken is None:
        text = f"ok: {report.checked} events, the hash chain is intact"
    else:
        text = (
            f"BROKEN at {report.broken} "
            f"({report.checked} events before it verified; nothing after it was checked)"
        )
    if report.oldest_pending is not None:
        text += (
            f"; {report.pending} pending (not sealed into the chain yet, the oldest "
            f"written {units.when_exact(report.oldest_pending)})"
        )
    return text


def backup(result: store_backup.BackupResult) -> str:
    total = sum(result.rows.values())
    return (
        f"backup written to {result.path}: {result.size_bytes / 1024:.0f} KiB, "
        f"{result.pages} pages, {total} rows in {len(result.rows)} tables; "
        f"integrity_check {result.integrity}, row counts match"
    )


def reconcile(reports: Sequence[files.FolderReport]) -> str:
    if not reports:
        return "no pipeline dispatches to files: nothing to reconcile"
    lines = []
    for r in reports:
        lines.append(f"{r.folder} ({', '.join(r.pipelines)}): {r.expected} files expected")
        for o in r.orphans:
            done = (
                "pruned"
                if o.name in r.pruned
                else ("not gatehouse's" if o.name in r.foreign else "orphan")
            )
            lines.append(f"  orphan  {o.name}  item {o.item_id or '?'}  [{done}]")
        for g in r.ghosts:
            lines.append(f"  ghost   {g}  [{'backfilled' if g in r.backfilled else 'missing'}]")
        if not r.orphans and not r.ghosts:
            lines.append("  in step with the store")
    return "\n".join(lines)


def emit(args: argparse.Namespace, value: Any, text: Callable[[], str]) -> None:
    # JSON escapes every such character itself (ensure_ascii); a terminal would obey them.
    print(json.dumps(operations.plain(value), indent=2) if args.json else visible.shown(text()))


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def dry_run(
    report: trial.Report,
    limit: int,
    counted: dict[str, Any] | None = None,
    *,
    filtered: bool = False,
    triaged: bool = False,
) -> str:
    """The cards as plain text, as a phone would show them, with what was left undrafted;
    `filtered` (the pipeline has a filter): each new entry's verdict and rule first;
    `triaged` (it has a triage): the calls that are not drafts are its triage."""
    lines = [f"dry run of {report.pipeline}: fetched {report.fetched}, {report.new} new"]
    lines += [f"error: {error}" for error in report.errors]
    lines += [f"failed: item {item}: {reason}" for item, reason in report.failed]
    if filtered:
        lines += ["", f"filter: {report.filtered} of {report.new} new entries dropped"]
        lines += [_verdict(verdict) for verdict in report.verdicts]
    for item_id, payload in report.cards:
        lines += ["", "─" * 40, _plain(card_text.card(item_id, payload))]
    if report.undrafted:
        lines += ["", f"… and {report.undrafted} more not drafted (--limit {limit})"]
    if report.spend is not None:
        lines += ["", _llm_calls(report, triaged)]
        if counted is not None and counted["claim"] is not None:
            lines.append(f"     counted against the store's budgets as claim {counted['claim']}")
        elif counted is not None:
            lines.append(f"     NOT counted against the store's budgets: {counted['problem']}")
        if report.uncertain_micros:
            lines.append(
                f"     and {units.money(report.uncertain_micros)} held as uncertain: "
                "the provider reported no usage (see its bill)"
            )
    lines += ["", "nothing was marked seen, stored or sent"]
    return "\n".join(lines)


def _llm_calls(report: trial.Report, triaged: bool) -> str:
    """ "LLM: 2 draft(s) and 2 triage call(s) through the budget ledger, cost ...": the
    calls that are not drafts counted apart, so the cost is not all the drafts'."""
    drafts = f"{report.llm_drafts} draft(s)"
    others = report.llm_calls - report.llm_drafts
    total = units.money(report.spent_micros)
    if others <= 0:
        return f"LLM: {drafts} through the budget ledger, cost {total}"
    # Without a triage, a call that is no card's draft is a draft that failed or was retried.
    kind = "triage call(s)" if triaged else "other call(s) (failed drafts)"
    split = (
        f"{units.money(report.draft_micros)} for the drafts, "
        f"{units.money(report.spent_micros - report.draft_micros)} for the "
        + ("triage" if triaged else "others")
    )
    return f"LLM: {drafts} and {others} {kind} through the budget ledger, cost {total} ({split})"


def _verdict(verdict: trial.Verdict) -> str:
    if verdict.rule is None:
        return f"  kept      {verdict.title[:60]}"
    return f"  filtered  {verdict.title[:60]}: {verdict.rule}"


def _plain(card_html: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", card_html))
