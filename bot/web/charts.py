"""Charts as photos: `/budget chart` (30 days of AI spend per scope against its daily
limit), `/status chart` (the last week's runs and approval waits) and `/stats chart`
(what each pipeline's entries became, its approval rate and spend per approved post).

    png = charts.budget_png(spend, now)     # pure: figures in, PNG bytes out
    await charts.reply_budget(update, store, now)

Drawn with matplotlib, the plotting library most Python operators know, kept up by a
large team and able to write a PNG with no display (the Agg backend). It costs tens of
megabytes and about a second to import, so it is imported only when a chart is first
asked for, never at startup; drawing runs in a thread, one chart at a time, so taps
keep being answered meanwhile. Every picture is a portrait WIDTH x HEIGHT pixels in
big type, drawn to be read at a phone's width (390 px).
"""

from __future__ import annotations

import asyncio
import io
import statistics
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from telegram import Update

from store import units
from store.db import Store
from store.reports import figures
from store.reports.stats import Stats

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Every chart is a portrait twice a phone's 390 px width, so a phone shows it at about
#: half size; text is drawn at FONT_PX or more: at least 12 px on the phone's screen also
#: in the demo page's bubble (about SHOWN_PX wide at a 390 px width).
WIDTH, HEIGHT, DPI, FONT_PX = 780, 1170, 100, 28
SHOWN_PX = 340
#: Room above a chart's highest value, so a limit line at the top stays inside the frame.
HEADROOM = 1.15
#: matplotlib sizes type in points.
POINTS = FONT_PX * 72 / DPI
#: What an entry became, in the order of the bars, and each one's colour.
OUTCOMES = (
    ("filtered", "tab:gray"),
    ("skipped", "tab:orange"),
    ("approved", "tab:green"),
    ("rejected", "tab:red"),
    ("expired", "tab:purple"),
    ("waiting", "tab:blue"),
)
BUDGET_DAYS = 30
STATUS_DAYS = 7
DAY_MS = 86_400_000
#: matplotlib's objects are not safe to draw from two threads at once.
_drawing = threading.Lock()


def _figure() -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI)


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=DPI)
    return buffer.getvalue()


def _big_type(axes: Any, ticks: int, integer: bool = False) -> None:
    """Tick labels in big type, and at most `ticks` of them on the value axis so they
    have room at that size."""
    from matplotlib.ticker import MaxNLocator

    axes.tick_params(labelsize=POINTS)
    axes.yaxis.set_major_locator(MaxNLocator(ticks, integer=integer))


def _days(now: datetime, count: int) -> list[datetime]:
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return [today - timedelta(days=count - 1 - n) for n in range(count)]


def budget_png(spend: list[figures.DaySpend], now: datetime) -> bytes:
    """Each scope's spend per day (USD) as a line, its daily limit dashed in the same colour."""
    with _drawing:
        return _png(budget_figure(spend, now))


def budget_figure(spend: list[figures.DaySpend], now: datetime) -> Figure:
    """The /budget chart's figure (the caller holds _drawing)."""
    days = _days(now, BUDGET_DAYS)
    figure = _figure()
    axes = figure.add_subplot()
    scopes = sorted({row.scope for row in spend}, key=lambda s: (s != "global", s))
    x = list(range(len(days)))
    highest = 0.0
    for scope in scopes:
        rows = {row.day.date(): row for row in spend if row.scope == scope}
        found = [rows.get(day.date()) for day in days]
        spent = [row.spent_micros / 1e6 if row else 0.0 for row in found]
        limit = _limits(found)
        (line,) = axes.plot(x, spent, marker=".", linewidth=3, label=f"{scope} spent")
        axes.plot(*_steps(limit), "--", linewidth=3, color=line.get_color(), label=f"{scope} limit")
        highest = max(highest, *spent, *(value for value in limit if value == value))
    ticks = [0, 10, 20, x[-1]]  # four dates fit across a phone in big type
    axes.set_xticks(ticks, [days[n].strftime("%b %d") for n in ticks])
    # Half a day each side: the first and last days' limits are not drawn on the frame.
    axes.set_xlim(-0.5, x[-1] + 0.5)
    if not scopes:
        axes.text(0.5, 0.5, "no AI spend recorded", ha="center", transform=axes.transAxes)
    axes.set_title(f"AI spend per day\nlast {BUDGET_DAYS} days (UTC)", fontsize=POINTS)
    axes.set_ylabel("USD", fontsize=POINTS)
    # Headroom above the highest limit, so its dashed line is not hidden by the frame.
    axes.set_ylim(0, highest * HEADROOM if highest else 1)
    _big_type(axes, 5)
    if scopes:  # below the plot, one scope's two lines per row
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=2, fontsize=POINTS)
    return figure


def _limits(found: list[figures.DaySpend | None]) -> list[float]:
    """Each day's limit (USD): a day without a budget row keeps the limit of the last day
    that had one (limits hold until changed); NaN before the first."""
    limits, last = [], float("nan")
    for row in found:
        last = row.limit_micros / 1e6 if row else last
        limits.append(last)
    return limits


def _steps(values: list[float]) -> tuple[list[float], list[float]]:
    """A line across each day's whole width (day n from n - 0.5 to n + 0.5), so a limit
    known for one day only is still a visible dash, not a lone point."""
    xs: list[float] = []
    ys: list[float] = []
    for n, value in enumerate(values):
        xs += [n - 0.5, n + 0.5]
        ys += [value, value]
    return xs, ys


def status_png(week: figures.Week, now: datetime) -> bytes:
    """Runs per day (ok and error, stacked) and the median wait for a decision per day."""
    with _drawing:
        return _png(status_figure(week, now))


def status_figure(week: figures.Week, now: datetime) -> Figure:
    """The /status chart's figure, runs above waits (the caller holds _drawing)."""
    days = _days(now, STATUS_DAYS)
    numbers = [int(day.timestamp() * 1000) // DAY_MS for day in days]
    figure = _figure()
    runs, waits = figure.subplots(2, 1)
    ok = [week.runs.get((n, "ok"), 0) for n in numbers]
    failed = [week.runs.get((n, "error"), 0) for n in numbers]
    labels = [day.strftime("%a\n%d") for day in days]  # two short lines fit seven days
    runs.bar(labels, ok, color="tab:green", label="ok")
    runs.bar(labels, failed, bottom=ok, color="tab:red", label="error")
    runs.set_title("runs per day", fontsize=POINTS)
    runs.legend(loc="upper left", fontsize=POINTS)
    medians = []
    for n in numbers:
        waited = [seconds / 60 for day, seconds in week.waits if day == n]
        medians.append(statistics.median(waited) if waited else 0.0)
    waits.bar(labels, medians, color="tab:blue")
    waits.set_title("median wait for a decision\n(minutes)", fontsize=POINTS)
    _big_type(runs, 5, integer=True)  # runs are counted
    _big_type(waits, 5)
    figure.suptitle(f"last {STATUS_DAYS} days (UTC)\nto {now:%Y-%m-%d %H:%M}", fontsize=POINTS)
    return figure


def outcomes(row: Stats) -> dict[str, int]:
    """What the window's entries became; carded ones not yet decided count as waiting."""
    decided = row.approved + row.rejected + row.expired
    return {
        "filtered": row.filtered,
        "skipped": row.skipped,
        "approved": row.approved,
        "rejected": row.rejected,
        "expired": row.expired,
        "waiting": max(0, row.carded - decided),
    }


def stats_png(found: list[Stats], days: int) -> bytes:
    """Per pipeline, a bar of what its entries became, and its approval rate labelled with
    its AI spend per approved post; big type, for a phone."""
    with _drawing:
        return _png(stats_figure(found, days))


def stats_figure(found: list[Stats], days: int) -> Figure:
    """The /stats chart's figure (the caller holds _drawing)."""
    names = [row.pipeline for row in found]
    from matplotlib.ticker import MaxNLocator

    figure = _figure()
    became, rates = figure.subplots(2, 1, height_ratios=[3, 2])
    left = [0] * len(found)
    for outcome, colour in OUTCOMES:
        counts = [outcomes(row)[outcome] for row in found]
        became.barh(names, counts, left=left, color=colour, label=outcome)
        left = [a + b for a, b in zip(left, counts, strict=True)]
    became.set_title(f"what entries became, last {days} days", fontsize=POINTS)
    became.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2, fontsize=POINTS)
    rate = [100 * (row.approval_rate or 0.0) for row in found]
    rates.barh(names, rate, color="tab:green")
    for n, row in enumerate(found):
        rates.text(2, n, _rate_label(row), va="center", fontsize=POINTS)
    rates.set_xlim(0, 100)
    rates.set_title("approved of decided (%)\nAI $ per approved post", fontsize=POINTS)
    for axes in (became, rates):
        axes.tick_params(labelsize=POINTS)
        axes.xaxis.set_major_locator(MaxNLocator(4, integer=True))  # room for big type
        axes.invert_yaxis()  # the first pipeline on top, as /stats lists them
    if not found:
        became.text(0.5, 0.5, "no pipelines", ha="center", transform=became.transAxes)
    return figure


def _rate_label(row: Stats) -> str:
    rate = "n/a" if row.approval_rate is None else f"{100 * row.approval_rate:.0f}%"
    per = row.spend_per_approved_micros
    return f"{rate} · " + ("no approved post" if per is None else units.money(per))


async def reply_budget(update: Update, store: Store, now: datetime) -> None:
    days = _days(now, BUDGET_DAYS)
    spend = await figures.spend_by_day(store, days[0])
    png = await asyncio.to_thread(budget_png, spend, now)
    await _reply(update, png, f"AI spend per scope, last {BUDGET_DAYS} days")


async def reply_status(update: Update, store: Store, now: datetime) -> None:
    week = await figures.week(store, _days(now, STATUS_DAYS)[0])
    png = await asyncio.to_thread(status_png, week, now)
    await _reply(update, png, f"runs and approval waits, last {STATUS_DAYS} days")


async def reply_stats(update: Update, found: list[Stats], days: int) -> None:
    png = await asyncio.to_thread(stats_png, found, days)
    await _reply(update, png, f"the editor's numbers, last {days} days")


async def _reply(update: Update, png: bytes, caption: str) -> None:
    message: Any = update.effective_message
    await message.reply_photo(photo=png, caption=caption, do_quote=False)
