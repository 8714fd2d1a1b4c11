"""Drawing charts from figures: PNG pictures of the promised size, with or without data."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

from PIL import Image

from bot import charts
from store import figures

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


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


def test_empty_charts_still_draw() -> None:
    assert size_of(charts.budget_png([], NOW)) == (charts.WIDTH, charts.HEIGHT)
    week = figures.Week({}, [])
    assert size_of(charts.status_png(week, NOW)) == (charts.WIDTH, charts.HEIGHT)
