"""The Grafana dashboard in deploy/ asks only for metrics gatehouse exposes, and every
exposed name keeps Prometheus conventions."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import exposition, parser

from bot.web import metrics
from pipelines.service import workers
from store.ledger import budgets
from store.reports import figures

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"


class _Families:
    def __init__(self) -> None:
        snap = figures.Snapshot(
            items={("news", "new"): 1},
            runs={("news", "ok"): figures.RunTotals(1, 2, 1, 1, 0)},
            outbox={"card": (1, 2.0)},
            claims={("settled", "news"): 1},
            sla_warned={"drafting": 1},
            budgets=[budgets.Budget("global", "day", datetime(2026, 12, 1, tzinfo=UTC), 5, 1, 0)],
        )
        running = workers.State("scheduler", "running", datetime(2026, 12, 1, tzinfo=UTC))
        self.found = list(metrics.families(snap, 4096, [running]))

    def collect(self) -> Iterator[metrics.Metric]:
        yield from metrics.REGISTRY.collect()
        yield from self.found


def exposed() -> set[str]:
    metrics.TELEGRAM_ERRORS.labels("rate_limited")  # a labelled metric shows once it has a child
    metrics.DECISION_SECONDS.labels("news", "approved")
    text = exposition.generate_latest(_Families()).decode()
    return {
        sample.name for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
    }  # fmt: skip


def test_the_dashboard_asks_only_for_exposed_metrics() -> None:
    names = exposed()
    assert all(name.startswith("gatehouse_") for name in names)
    assert all(re.fullmatch(r"[a-z_]+", name) for name in names)
    dashboard = json.loads(DASHBOARD.read_text())
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"gatehouse_[a-z_]+", target["expr"])
    }
    assert asked and asked <= names, sorted(asked - names)
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
