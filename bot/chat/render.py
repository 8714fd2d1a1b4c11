"""What the bot says, as Telegram HTML: /status, /pending, /budget, ... (cards: card_text)

Pure functions from store rows to text; nothing here reads the clock (`now` is passed)
or does I/O. Every fetched or generated text goes through `esc` (html.escape), so a
feed title with `<b>` in it stays text, and a bidi control or zero-width character in
it shows as a mark (`pipelines.text.visible`) instead of reordering or hiding the line.
Tags never span a line, so `pipelines.text.telegram.split` can cut a long text into
messages Telegram accepts.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import datetime

from bot.chat import wording
from bot.ground import logs, storage_alarm
from pipelines import operations
from pipelines.providers import pace
from pipelines.service import workers
from pipelines.text import visible
from store import items, units
from store.audit import events
from store.intake import runs
from store.ledger import budgets as ledger_budgets
from store.ledger import reporting as ledger_report


def esc(text: object) -> str:
    return html.escape(visible.shown(str(text)), quote=True)


when = units.when


age = units.ago


def usd(micros: int | None) -> str:
    """Money as a person reads it on a card or a list ("$0.013"); n/a for none."""
    return "n/a" if micros is None else units.money(micros)


def usd_exact(micros: int | None) -> str:
    """Money to the micro-dollar, where an amount is acted on (a budget's detail, a hold)."""
    return "n/a" if micros is None else units.usd(micros)


def by_day(trail: Sequence[events.Event]) -> list[tuple[str, list[events.Event]]]:
    """Events under the day they happened on, in order: a history says each date once."""
    days: list[tuple[str, list[events.Event]]] = []
    for event in trail:
        day = units.day(event.at)
        if not days or days[-1][0] != day:
            days.append((day, []))
        days[-1][1].append(event)
    return days


# -- commands ---------------------------------------------------------------------------


def status_overview(overview: operations.Overview) -> str:
    """Worst news first, then one short block per pipeline."""
    now = overview.at
    lines = [headline(overview)]
    if overview.storage is not None:
        lines.append(f"🚨 {esc(storage_alarm.describe(overview.storage))}")
    if overview.workers_down:
        lines.append(workers_line(overview.workers_down, len(overview.worker_states), now))
    for p in overview.pipelines:
        lines.append(f"\n<b>{esc(p.name)}</b>" + (" ⏸ paused" if p.paused else ""))
        if not p.has_file:
            lines.append("  ⚠️ " + esc(no_file_note(p)))
        lines.append("  last run " + (_run_summary(p.last_run, now) if p.last_run else "none yet"))
        if p.last_run and dropped_lists(p.name, p.last_run.counts):
            lines.append("  " + dropped_lists(p.name, p.last_run.counts))
        if not p.paused and p.has_file:
            due = p.next_due_at
            lines.append(f"  next run {age(due, now) if due else 'not scheduled'}")
        waiting = [wording.plural(p.awaiting, "item") + " waiting"]
        if p.breaches:
            waiting.append("⚠️ " + wording.plural(p.breaches, "breach"))
        lines.append("  " + " · ".join(waiting))
    if overview.worker_states and not overview.workers_down:
        standby = sum(w.status == "standby" for w in overview.worker_states)
        lines.append("\n" + workers_line((), len(overview.worker_states), now, standby))
    if overview.models:
        lines.append("\n" + "\n".join(esc(pace_line(m)) for m in overview.models))
    return "\n".join(lines)


def pace_line(m: pace.Snapshot) -> str:
    """`gpt-4o-mini: 38 in flight / 40 (stated 40) · 429s 1h: 0`: calls in flight of the
    pace's limit, the provider's stated limit, and its 429s in the last hour."""
    stated = f" (stated {m.stated})" if m.stated is not None else ""
    limited = f"{'⚠️ ' if m.rate_limited_last_hour else ''}429s 1h: {m.rate_limited_last_hour}"
    return f"{m.model}: {m.in_flight} in flight / {m.limit}{stated} · {limited}"


def no_file_note(p: operations.PipelineStatus) -> str:
    """What a pipeline the store knows but no file declares means for its items."""
    left = wording.plural(p.awaiting + p.breaches, "item")
    return f"{p.name}: no pipeline file: {left} still waiting, and nothing will run it"


def headline(overview: operations.Overview) -> str:
    """ "gatehouse · 1 breach · 2 uncertain holds": what needs a person, worst first."""
    bad: list[str] = []
    if overview.storage is not None:
        bad.append("🚨 storage failing")
    if overview.workers_down:
        bad.append(wording.plural(len(overview.workers_down), "worker") + " down")
    breaches = sum(p.breaches for p in overview.pipelines)
    if breaches:
        bad.append(wording.plural(breaches, "breach"))
    if overview.uncertain_holds:
        bad.append(wording.plural(overview.uncertain_holds, "uncertain hold"))
    failed = sum(1 for p in overview.pipelines if p.last_run and p.last_run.status == "error")
    if failed:
        bad.append(wording.plural(failed, "failed run"))
    waiting = sum(p.awaiting for p in overview.pipelines)
    news = bad or ["✅ all well"]
    if waiting:
        news.append(f"{waiting} waiting")
    return "<b>gatehouse</b> · " + " · ".join(news)


#: A worker's last error may quote a URL: token-shaped text is never shown.
_redact = logs.RedactTokens().redact


def workers_line(down: Sequence[workers.State], total: int, now: datetime, standby: int = 0) -> str:
    """`workers: all 6 running` (saying how many stand by for the leader), or one line
    per worker that is not running."""
    if not down and standby:
        return f"workers: all {total} well ({standby} on standby: another worker leads)"
    if not down:
        return f"workers: all {total} running"
    lines = [f"⚠️ {len(down)} of {wording.plural(total, 'worker')} not running:"]
    for w in down:
        error = f": {esc(_redact(w.error))}" if w.error else ""
        lines.append(f"  {esc(w.name)} {esc(w.status)} since {age(w.since, now)}{error}")
    return "\n".join(lines)


def _run_summary(run: runs.Run, now: datetime) -> str:
    mark = {"ok": "🟢", "error": "🔴", "running": "🔄"}.get(run.status, "")
    text = f"{mark} {esc(run.status)} {age(run.started_at, now)}: {run_counts(run.counts)}"
    if run.error_text:
        text += f": {esc(run.error_text[:200])}"
    return text


def run_counts(c: runs.Counts) -> str:
    """ "10 new of 10: 2 filtered, 3 skipped by triage, 5 drafted": every outcome of the
    new entries named, so the counts add up (drafted may include earlier runs' entries)."""
    outcomes = [(c.filtered, "filtered"), (c.skipped, "skipped by triage")]
    outcomes += [(c.drafted, "drafted"), (c.failed, "failed")]
    # What neither the filter, the triage nor a draft has settled yet (a held budget).
    waiting = c.new - c.filtered - c.skipped - c.drafted - c.failed
    outcomes.append((waiting, "not drafted yet"))
    named = [f"{n} {word}" for n, word in outcomes if n > 0]
    return f"{c.new} new of {c.fetched}" + (": " + ", ".join(named) if named else "")


def dropped_lists(name: str, c: runs.Counts) -> str:
    """Where a run's dropped entries are listed in chat, or "" when it dropped none."""
    lists = [f"/filtered {name}"] if c.filtered else []
    lists += [f"/skipped {name}"] if c.skipped else []
    return "lists: " + " · ".join(esc(x) for x in lists) if lists else ""


def status_pipeline(found: operations.PipelineRuns, now: datetime) -> str:
    recent = found.recent
    lines = [f"<b>{esc(found.name)}</b>: last {wording.plural(len(recent), 'run')}, newest first"]
    lines.extend(f"  #{run.id} {run.trigger}: {_run_summary(run, now)}" for run in recent)
    if not recent:
        lines.append("  no runs yet")
    return "\n".join(lines + where_to_look(found, now))


def where_to_look(found: operations.PipelineRuns, now: datetime, *, chat: bool = True) -> list[str]:
    """The lines under a pipeline's runs (Telegram and the CLI alike): the last green run,
    the first red one after it, and what the filter and the triage dropped today, with
    the command that lists them (in chat, or at a terminal when not `chat`)."""
    lines = []
    window = found.window
    if window.last_ok is not None:
        lines.append(f"last green: #{window.last_ok.id} {age(window.last_ok.started_at, now)}")
    if window.first_error_after is not None:
        red = window.first_error_after
        lines.append(f"first red after it: #{red.id} {age(red.started_at, now)}")
    for count, word in ((found.filtered_today, "filtered"), (found.skipped_today, "skipped")):
        listed = f"/{word} {found.name}" if chat else f"gatehouse {word} {found.name}"
        if count:
            lines.append(f"{count} {word} today: {esc(listed) if chat else listed}")
    return lines


def pending(waiting: Sequence[items.Item], now: datetime) -> str:
    """Items awaiting approval, oldest first (the buttons below show each one's card)."""
    if not waiting:
        return "Nothing is waiting for approval."
    lines = [f"<b>{wording.plural(len(waiting), 'item')} waiting for approval</b>, oldest first"]
    for item in waiting:
        title = str(item.payload.get("title") or item.source_id)[:80]
        waited = age(item.last_transition_at, now).removesuffix(" ago")
        lines.append(
            f"• <b>{item.id}</b> {esc(item.pipeline)} v{item.version} · {waited}: {esc(title)}"
        )
    return "\n".join(lines)


def history(item: items.Item, trail: Sequence[events.Event], tells: str = "") -> str:
    """An item's events by day; `tells`: its newest version's tells line, said under it."""
    lines = [f"<b>item {item.id}</b> ({esc(item.pipeline)}): {esc(wording.state(item.state))}"]
    if tells:
        lines.append(f"version {item.version}: {esc(tells)}")
    for day, happened in by_day(trail):
        lines.append(f"<i>{day} (UTC)</i>")
        for event in happened:
            told = own_words(event)
            reason = f": {esc(told)}" if told else ""
            lines.append(
                f"  {units.clock(event.at)} {esc(wording.state(event.to_state))}"
                f" by {esc(event.actor)} (attempt {event.attempt}){reason}"
            )
    return "\n".join(lines)


def own_words(event: events.Event) -> str:
    """What an event's reason adds to its line: "rejected by A: too long" on a line
    that already says "rejected by A" adds "too long" (the operator is named once)."""
    reason = event.reason or ""
    said = f"{event.to_state} by {event.actor}"
    return (
        reason.removeprefix(said).removeprefix(":").strip() if reason.startswith(said) else reason
    )


def replay_offer(
    item: items.Item,
    trail: Sequence[events.Event],
    kept: operations.KeptDraft | None = None,
    tells: str = "",
) -> str:
    why = item.reason or "no reason recorded"
    dropped = f"<b>dropped</b>: {esc(wording.state(item.state))}, {esc(why)}"
    text = f"{history(item, trail, tells)}\n\n{dropped}"
    if kept is not None:
        saves = (
            f"saves about {units.usd(kept.cost_micros)}, what that draft cost"
            if kept.cost_micros is not None
            else "saves a new call (what that draft cost is not known yet)"
        )
        text += (
            f"\nThe provider already wrote a draft no card showed (budget claim "
            f"{kept.claim_id}): Replay shows it without a new call, which {saves}; "
            "Fresh draft pays for a new one."
        )
    return text + "\nReplay it?"


def skipped(
    name: str,
    found: Sequence[items.Item],
    now: datetime,
    more: bool,
    replayed: Mapping[int, str] | None = None,
) -> str:
    """A pipeline's skipped entries, each with the triage's score and reason; its buttons
    (one per entry, in the same order) bring one to a card. `replayed`: the listed entries
    a tap brought back (item id to where its card goes), struck through and marked."""
    if not found:
        return f"Nothing of <b>{esc(name)}</b> was skipped (or every skipped entry was replayed)."
    replayed = replayed or {}
    lines = [f"<b>{esc(name)}</b>: {len(found)} skipped, newest first"]
    for n, item in enumerate(found, 1):
        title = str(item.payload.get("title") or item.source_id)[:80]
        why = item.reason or "no reason recorded"
        if item.id in replayed:
            lines.append(
                f"<s>{n}. #{item.id} {esc(title)}</s> ✓ replayed: {esc(replayed[item.id])}"
            )
            continue
        lines.append(f"{n}. #{item.id} {esc(title)} ({age(item.last_transition_at, now)})")
        lines.append(f"    <i>{esc(why)}</i>")
    if more:
        lines.append(f"older ones: gatehouse skipped {esc(name)} --limit 200")
    if len(replayed) < len(found):
        lines.append("Tap a number to bring that entry to a card (a replay past triage).")
    else:
        lines.append("Every entry listed was replayed.")
    return "\n".join(lines)


def filtered(name: str, found: Sequence[items.Item], now: datetime, more: bool) -> str:
    """A pipeline's filtered entries, newest first, each with the rule that dropped it."""
    if not found:
        return f"Nothing of <b>{esc(name)}</b> was filtered (or every filtered entry was replayed)."
    lines = [f"<b>{esc(name)}</b>: {len(found)} filtered, newest first"]
    for item in found:
        title = str(item.payload.get("title") or item.source_id)[:80]
        lines.append(f"• #{item.id} {esc(title)} ({age(item.last_transition_at, now)})")
        lines.append(f"    <i>{esc(item.reason or 'no rule recorded')}</i>")
    if more:
        lines.append(f"older ones: gatehouse filtered {esc(name)} --limit 200")
    lines.append("Bring one back past the filter with /replay &lt;item&gt;.")
    return "\n".join(lines)


def stats(found: Sequence[operations.Stats], days: int) -> str:
    """Each pipeline's numbers over the window, as an editor reads them on a phone."""
    if not found:
        return "No pipelines."
    return "\n\n".join(_stats_one(one, days) for one in found)


def _stats_one(s: operations.Stats, days: int) -> str:
    rate = "n/a" if s.approval_rate is None else f"{s.approval_rate:.0%}"
    lines = [
        f"<b>{esc(s.pipeline)}</b>, last {days} days",
        f"entries {s.entries} · filtered {s.filtered} · skipped {s.skipped} · carded {s.carded}",
        f"approved {s.approved} · rejected {s.rejected} · expired {s.expired} · undone {s.undone}",
        f"approval rate {rate}",
        f"card to decision: median {wait(s.median_wait_s)}, p90 {wait(s.p90_wait_s)}",
        f"AI spend {usd(s.spend_micros)}, per approved post {usd(s.spend_per_approved_micros)}",
    ]
    if s.reject_reasons:
        reasons = ", ".join(f"{esc(why)} ({n})" for why, n in s.reject_reasons)
        lines.append(f"top reject reasons: {reasons}")
    return "\n".join(lines)


def wait(seconds: float | None) -> str:
    """A wait in seconds as a duration; n/a when nothing was decided."""
    return "n/a" if seconds is None else units.duration(int(seconds))


def budget(report: ledger_report.Report, now: datetime) -> str:
    if not report.budgets:
        lines = ["No budgets configured: LLM drafting is off; the template drafter runs."]
    else:
        lines = ["<b>budgets</b>"]
    for b in sorted(report.budgets, key=lambda b: (b.scope, b.period)):
        period = "today" if b.period == "day" else "this month"
        lines.append(
            f"<b>{esc(b.scope)}</b> {wording.bar(b.pct_used / 100)} {b.pct_used:.0f}%"
            f" of {usd(b.limit_micros)} {period}"
        )
        held = f" · {usd(b.held_micros)} held" if b.held_micros else ""
        lines.append(f"  {usd(b.spent_micros)} spent{held} · {usd(b.remaining_micros)} left")
        exact = exact_detail(b)
        if exact:
            lines.append(f"  <i>exact: {exact}</i>")
    if report.uncertain:
        count = wording.plural(len(report.uncertain), "uncertain hold")
        lines.append(
            f"\n⚠️ <b>{count}</b> (settle: the alert's Not charged / Charged, or gatehouse "
            "reconcile-claim --uncertain):"
        )
        for hold in report.uncertain:
            lines.append(
                f"• claim {hold.claim_id} {esc(hold.pipeline)} item {hold.item_id}"
                f" ({esc(wording.state(hold.item_state or '?'))}): "
                f"{usd_exact(hold.reserved_micros)}"
                f" since {age(hold.since, now)}; {esc(hold.reason or '')}"
            )
    else:
        lines.append("no uncertain holds")
    return "\n".join(lines)


def exact_detail(b: ledger_budgets.Budget) -> str:
    """A budget's amounts to the micro-dollar when the rounded ones hide something."""
    amounts = [(b.spent_micros, "spent"), (b.held_micros, "held"), (b.remaining_micros, "left")]
    shown = [(m, word) for m, word in amounts if m or word != "held"]
    if all(units.money(m) == units.usd(m) for m, _ in shown):
        return ""
    return " · ".join(f"{units.usd(m)} {word}" for m, word in shown)


duration = units.duration
