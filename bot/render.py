"""What the bot says, as Telegram HTML: cards, decisions, /status, /pending, /budget, ...

Pure functions from store rows to text; nothing here reads the clock (`now` is passed)
or does I/O. Every fetched or generated text goes through `esc` (html.escape), so a
feed title with `<b>` in it stays text. Tags never span a line, so
`pipelines.text.telegram.split` can cut a long text into messages Telegram accepts.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from bot import logs, storage_alarm
from pipelines import operations, workers
from pipelines.text import telegram as telegram_text
from pipelines.text import validation
from store import events, items, runs
from store.ledger import budgets
from store.ledger import reporting as ledger_report

#: The longest title a card shows (characters).
TITLE_SHOWN = 1_000
#: Room kept free on a card's last part for the decision line added when it is edited.
DECISION_ROOM = 300


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def age(at: datetime | None, now: datetime) -> str:
    if at is None:
        return "never"
    seconds = int((now - at).total_seconds())
    if seconds < 0:
        return "in " + _span(-seconds)
    return _span(seconds) + " ago"


def _span(seconds: int) -> str:
    if seconds < 90:
        return f"{seconds}s"
    if seconds < 90 * 60:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d"


def usd(micros: int | None) -> str:
    return "n/a" if micros is None else budgets.usd(micros)


# -- approval cards ---------------------------------------------------------------------


def card(item_id: int, payload: dict[str, Any]) -> str:
    """An approval card from a `card` outbox row's payload."""
    lines = [f"📝 <b>{esc(payload.get('pipeline', '?'))}</b> · item {item_id}"]
    # Cleaned as drafts are (items stored before titles were cleaned at load keep their
    # zero-width characters), so a title and a draft that opens with it compare equal.
    title = validation.clean(str(payload.get("title") or ""), TITLE_SHOWN)
    link = payload.get("link")
    if title and str(payload.get("text", "")).lstrip().startswith(title):
        title = ""  # the draft opens with it (the template drafter's shape): say it once
    if title and link:
        lines.append(f'<a href="{esc(link)}">{esc(title)}</a>')
    elif link:
        lines.append(f'🔗 <a href="{esc(link)}">source</a>')
    elif title:
        lines.append(esc(title))
    if payload.get("duplicate_of") is not None:
        reason = payload.get("duplicate_reason") or "similar text"
        lines.append(f"⚠️ possible duplicate of item {esc(payload['duplicate_of'])}: {esc(reason)}")
    lines.append("")
    lines.extend(esc(payload.get("text", "")).split("\n"))
    lines.append("")
    meta = [
        f"version {esc(payload.get('version', '?'))}",
        f"attempt {esc(payload.get('attempt', '?'))}",
        f"drafter {esc(payload.get('drafter', '?'))}",
        f"cost {usd(payload.get('cost_micros'))}",
    ]
    lines.append("<i>" + " · ".join(meta) + "</i>")
    if payload.get("note"):
        lines.append(f"<i>{esc(payload['note'])}</i>")
    return "\n".join(lines)


def card_parts(item_id: int, payload: dict[str, Any]) -> list[str]:
    return telegram_text.split(card(item_id, payload), telegram_text.MAX_MESSAGE - DECISION_ROOM)


def decision_line(edit: dict[str, Any], at: datetime) -> str:
    """The line a decided card gains, from a `card_edit` payload (its status line if any)."""
    if edit.get("status"):
        return esc(edit["status"])
    who = ", ".join(str(x) for x in edit.get("decided_by") or []) or "?"
    state = str(edit.get("state", ""))
    if state == "rejected":
        return f"❌ rejected by {esc(who)} at {when(at)}"
    if state == "awaiting_approval":
        return f"⏳ votes so far: {esc(who)}"
    return f"✅ approved by {esc(who)} at {when(at)}"


def decided_card(last_part: str, edit: dict[str, Any], at: datetime) -> str:
    return f"{last_part}\n\n{decision_line(edit, at)}"


# -- commands ---------------------------------------------------------------------------


def status_overview(overview: operations.Overview) -> str:
    now = overview.at
    lines = ["<b>gatehouse status</b>"]
    for p in overview.pipelines:
        flags = " ⏸ paused" if p.paused else ""
        lines.append(f"\n<b>{esc(p.name)}</b>{flags}")
        lines.append("  last run: " + (_run_summary(p.last_run, now) if p.last_run else "none yet"))
        due = p.next_due_at
        lines.append(f"  next due: {age(due, now) if due else 'not scheduled'}")
        lines.append(f"  awaiting approval: {p.awaiting} · breaches: {p.breaches}")
    lines.append(f"\nstore WAL: {overview.wal_bytes / 1024:.0f} KiB")
    if overview.storage is not None:
        lines.append(f"🚨 {esc(storage_alarm.describe(overview.storage))}")
    if overview.worker_states:
        lines.append(workers_line(overview.workers_down, len(overview.worker_states), now))
    return "\n".join(lines)


#: A worker's last error may quote a URL: token-shaped text is never shown.
_redact = logs.RedactTokens().redact


def workers_line(down: Sequence[workers.State], total: int, now: datetime) -> str:
    """`workers: all 6 running`, or one line per worker that is not running."""
    if not down:
        return f"workers: all {total} running"
    lines = [f"⚠️ {len(down)} of {total} workers not running:"]
    for w in down:
        error = f": {esc(_redact(w.error))}" if w.error else ""
        lines.append(f"  {esc(w.name)} {w.status} since {age(w.since, now)}{error}")
    return "\n".join(lines)


def _run_summary(run: runs.Run, now: datetime) -> str:
    c = run.counts
    mark = {"ok": "🟢", "error": "🔴", "running": "🔄"}.get(run.status, "")
    text = (
        f"{mark} {esc(run.status)} {age(run.started_at, now)} "
        f"(fetched {c.fetched}, new {c.new}, drafted {c.drafted}, failed {c.failed})"
    )
    if run.error_text:
        text += f": {esc(run.error_text[:200])}"
    return text


def status_pipeline(
    name: str, recent: Sequence[runs.Run], window: runs.Window, now: datetime
) -> str:
    lines = [f"<b>{esc(name)}</b>: last {len(recent)} runs, newest first"]
    lines.extend(f"  #{run.id} {run.trigger}: {_run_summary(run, now)}" for run in recent)
    if not recent:
        lines.append("  no runs yet")
    if window.last_ok is not None:
        lines.append(f"last green: #{window.last_ok.id} {age(window.last_ok.started_at, now)}")
    if window.first_error_after is not None:
        red = window.first_error_after
        lines.append(f"first red after it: #{red.id} {age(red.started_at, now)}")
    return "\n".join(lines)


def pending(waiting: Sequence[items.Item], cards: dict[int, int], now: datetime) -> str:
    """Items awaiting approval, oldest first; `cards` maps item id to its card in this chat."""
    if not waiting:
        return "Nothing is awaiting approval."
    lines = [f"<b>{len(waiting)} awaiting approval</b>, oldest first"]
    for item in waiting:
        title = str(item.payload.get("title") or item.source_id)[:80]
        where = f" → card message {cards[item.id]}" if item.id in cards else ""
        lines.append(
            f"• item {item.id} <b>{esc(item.pipeline)}</b> v{item.version}: {esc(title)}"
            f" · waiting {age(item.last_transition_at, now).removesuffix(' ago')}{where}"
        )
    return "\n".join(lines)


def history(item: items.Item, trail: Sequence[events.Event]) -> str:
    lines = [f"<b>item {item.id}</b> ({esc(item.pipeline)}): {esc(item.state)}"]
    for event in trail:
        reason = f": {esc(event.reason)}" if event.reason else ""
        lines.append(
            f"  {when(event.at)} {esc(event.from_state or '·')} → {esc(event.to_state)}"
            f" by {esc(event.actor)} (attempt {event.attempt}){reason}"
        )
    return "\n".join(lines)


def replay_offer(item: items.Item, trail: Sequence[events.Event], kept: Sequence[int] = ()) -> str:
    why = item.reason or "no reason recorded"
    text = f"{history(item, trail)}\n\n<b>dropped</b>: {esc(item.state)}, {esc(why)}"
    if kept:
        text += (
            f"\nThe provider already wrote a draft no card showed (budget claim {kept[-1]}): "
            "Replay shows it without a new call; Fresh draft pays for a new one."
        )
    return text + "\nReplay it?"


def budget(report: ledger_report.Report, now: datetime) -> str:
    if not report.budgets:
        lines = ["No budgets configured: LLM drafting is off; the template drafter runs."]
    else:
        lines = ["<b>budgets</b> (spent / held / remaining of limit)"]
    for b in sorted(report.budgets, key=lambda b: (b.scope, b.period)):
        lines.append(
            f"• {esc(b.scope)} {'today' if b.period == 'day' else 'this month'}: "
            f"{usd(b.spent_micros)} / {usd(b.held_micros)} / {usd(b.remaining_micros)}"
            f" of {usd(b.limit_micros)} ({b.pct_used:.0f}% used)"
        )
    if report.uncertain:
        count = len(report.uncertain)
        lines.append(f"\n⚠️ <b>{count} uncertain holds</b> (settle: gatehouse reconcile-claim):")
        for hold in report.uncertain:
            lines.append(
                f"• claim {hold.claim_id} {esc(hold.pipeline)} item {hold.item_id}"
                f" ({esc(hold.item_state or '?')}): {usd(hold.reserved_micros)}"
                f" since {age(hold.since, now)}; {esc(hold.reason or '')}"
            )
    else:
        lines.append("no uncertain holds")
    return "\n".join(lines)


def duration(span: timedelta) -> str:
    return _span(int(span.total_seconds()))
