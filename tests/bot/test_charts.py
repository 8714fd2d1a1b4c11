"""Drawing charts from figures: PNG pictures of the promised size, with or without data."""

from __future__ import annotations

import io
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from PIL import Image

from bot.web import charts
from store.reports import figures
from store.reports.stats import Stats

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
#: How wide a phone shows a chart (CSS pixels): the demo page's bubble at a 390 px
#: screen (Telegram shows it the screen's width, wider still).
PHONE_PX = charts.SHOWN_PX


def size_of(png: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(png)) as picture:
        picture.verify()
    with Image.open(io.BytesIO(png)) as picture:
        return picture.size


def test_budget_chart_with_two_scopes() -> None:
    today = NOW.replace(hour=0, minute=30)
    spend = [
        figures.DaySpend(scope, today - timedelta(days=n), 10_000 * n, limit)
        for scope, limit in (("global", 2_000_000), ("news", 500_000))
        for n in range(12)
    ]
    assert size_of(charts.budget_png(spend, NOW)) == (charts.WIDTH, charts.HEIGHT)


def test_a_limit_known_for_one_day_is_drawn_inside_the_budget_charts_frame() -> None:
    """The demo's first day: one budget row. Its limit is a visible dash below the top of
    the frame, not a lone point nor a line on the frame."""
    spend = [figures.DaySpend("global", NOW.replace(hour=0), 65_231, 100_000)]
    with charts._drawing:
        axes = charts.budget_figure(spend, NOW).axes[0]
    (limit,) = [line for line in axes.get_lines() if line.get_label() == "global limit"]
    line: Any = limit  # matplotlib types its data as any array-like
    points = zip(line.get_xdata(), line.get_ydata(), strict=True)
    xs = [float(x) for x, y in points if y == y]  # NaN: no limit known that day
    assert max(xs) - min(xs) >= 1  # a day wide
    low, high = axes.get_xlim()
    assert low <= min(xs) and max(xs) <= high
    assert axes.get_ylim()[1] > 0.1


def test_empty_charts_still_draw() -> None:
    assert size_of(charts.budget_png([], NOW)) == (charts.WIDTH, charts.HEIGHT)
    week = figures.Week({}, [])
    assert size_of(charts.status_png(week, NOW)) == (charts.WIDTH, charts.HEIGHT)


def _stats(pipeline: str, **numbers: object) -> Stats:
    return Stats(pipeline, NOW - timedelta(days=7), NOW, **numbers)  # type: ignore[arg-type]


STATS = [
    _stats(
        "city-transport", entries=60, filtered=10, skipped=20, carded=30, approved=18,
        rejected=6, expired=2, approval_rate=0.75, spend_per_approved_micros=4_200,
    ),
    _stats("releases", entries=3, carded=1),
]  # fmt: skip


def test_the_stats_chart_is_a_portrait_for_a_phone() -> None:
    assert size_of(charts.stats_png(STATS, 7)) == (charts.WIDTH, charts.HEIGHT)
    assert size_of(charts.stats_png([], 30)) == (charts.WIDTH, charts.HEIGHT)
    assert charts.outcomes(STATS[0]) == {
        "filtered": 10, "skipped": 20, "approved": 18, "rejected": 6, "expired": 2, "waiting": 4
    }  # fmt: skip


def test_every_word_of_the_stats_chart_is_readable_at_phone_width() -> None:
    """Shown on a phone, each text is at least 12 px high and wholly inside the picture."""
    shown = readable(lambda: charts.stats_figure(STATS, 7))
    assert {"city-transport", "releases", "skipped", "75% · 0.42¢"} <= shown


def test_every_word_of_the_status_and_budget_charts_is_readable_at_phone_width() -> None:
    today = NOW.replace(hour=0, minute=30)
    spend = [
        figures.DaySpend(scope, today - timedelta(days=n), 10_000 * n, limit)
        for scope, limit in (("global", 2_000_000), ("city-transport", 500_000))
        for n in range(12)
    ]
    shown = readable(lambda: charts.budget_figure(spend, NOW))
    assert {"global spent", "city-transport limit", "USD"} <= shown
    day = int(NOW.timestamp() * 1000) // charts.DAY_MS
    week = figures.Week({(day, "ok"): 3, (day - 1, "error"): 1}, [(day, 90.0)])
    shown = readable(lambda: charts.status_figure(week, NOW))
    assert {"ok", "error", "Tue\n01"} <= shown


def readable(draw: Callable[[], Figure]) -> set[str]:
    """Draws a chart's figure and checks that, shown PHONE_PX wide, each text is at least
    12 px high and wholly inside the picture; returns the texts drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    with charts._drawing:
        figure = draw()
        renderer = FigureCanvasAgg(figure).get_renderer()
        figure.tight_layout()
        figure.draw(renderer)
        width, height = figure.bbox.width, figure.bbox.height
        assert (width, height) == (charts.WIDTH, charts.HEIGHT)
        texts = [t for t in figure.findobj(Text) if t.get_text().strip() and _drawn(t)]
        scale = PHONE_PX / width
        for text in texts:
            assert text.get_fontsize() * charts.DPI / 72 * scale >= 12, text.get_text()
            box = text.get_window_extent(renderer)
            assert box.x0 >= 0 and box.y0 >= 0, text.get_text()
            assert box.x1 <= width and box.y1 <= height, text.get_text()
        return {t.get_text() for t in texts}


def _drawn(text: Any) -> bool:
    """Whether a text is drawn: visible, and if a tick's label, its tick within the view
    (matplotlib keeps labels for the ticks just past the axis limits, undrawn)."""
    if not text.get_visible():
        return False
    for axes in text.figure.axes if text.figure else []:
        for axis, (low, high) in ((axes.xaxis, axes.get_xlim()), (axes.yaxis, axes.get_ylim())):
            ticks = axis.get_majorticklocs()
            for where, label in zip(ticks, axis.get_ticklabels(), strict=False):
                if label is text:
                    return bool(min(low, high) <= where <= max(low, high))
    return True
