"""Replies read on a phone: the worst news first, no next run for a paused pipeline,
plurals, states in words, budget bars, one shape for every version's card, and a
history that does not say the same thing twice."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from bot.chat import card_text, cluster, render, wording
from bot.cli import output as cli_output
from pipelines import operations
from pipelines.service import workers
from store import items
from store.audit import events
from store.cluster import heartbeats
from store.intake import runs
from store.items.machine import State
from store.reports import info

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def status(name: str, **kw: object) -> operations.PipelineStatus:
    fields: dict[str, object] = {"paused": False, "next_due_at": NOW + timedelta(minutes=14),
                                 "last_run": None, "awaiting": 0, "breaches": 0} | kw  # fmt: skip
    return operations.PipelineStatus(name, **fields)  # type: ignore[arg-type]


def test_status_puts_the_worst_news_first_and_no_next_run_when_paused() -> None:
    red = runs.Run(3, "mail", "schedule", NOW - timedelta(minutes=5), NOW, "error",
                   runs.Counts(1, 1, 0, 1), "boom")  # fmt: skip
    overview = operations.Overview(
        NOW,
        [status("mail", last_run=red, breaches=1, awaiting=1),
         status("news", paused=True, awaiting=2)],
        wal_bytes=358 * 1024,
        worker_states=[workers.State("sender", "restarting", NOW, error="x")],
        uncertain_holds=2,
    )  # fmt: skip
    text = render.status_overview(overview)
    assert text.split("\n")[0] == (
        "<b>gatehouse</b> · 1 worker down · 1 breach · 2 uncertain holds · 1 failed run · 3 waiting"
    )
    news = text.split("<b>news</b>")[1]
    assert "⏸ paused" in news and "next run" not in news and "2 items waiting" in news
    assert "next run in 14 min" in text.split("<b>mail</b>")[1].split("<b>news</b>")[0]
    assert "1 item waiting · ⚠️ 1 breach" in text
    assert "WAL" not in text and "KiB" not in text and "awaiting_approval" not in text
    calm = operations.Overview(NOW, [status("news")], wal_bytes=0)
    assert render.status_overview(calm).startswith("<b>gatehouse</b> · ✅ all well\n")


@pytest.mark.parametrize(
    ("share", "bar"),
    [(0.0, "░░░░░"), (0.09, "░░░░░"), (0.62, "▓▓▓░░"), (1.0, "▓▓▓▓▓"), (3.0, "▓▓▓▓▓")],
)
def test_budget_bars(share: float, bar: str) -> None:
    assert wording.bar(share) == bar


def test_words_and_plurals() -> None:
    assert wording.state(State.AWAITING_APPROVAL) == "waiting for approval"
    assert wording.state("dispatched") == "sent"
    assert [wording.plural(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
    assert wording.plural(2, "breach") == "2 breaches"


def test_every_version_of_a_card_has_the_same_lines() -> None:
    base = {"pipeline": "news", "title": "Bike lanes", "link": "https://example.org/a",
            "attempt": 1, "drafter": "template", "cost_micros": 0}  # fmt: skip
    first = card_text.card(1, base | {"version": 1, "text": "Bike lanes\n\nThe council voted."})
    edited = card_text.card(1, base | {"version": 2, "text": "New words", "note": "edited by x"})
    for card in (first, edited):
        head = card.split("\n")
        assert head[0] == "📝 <b>news</b> · item 1"
        assert head[1] == '🔗 <a href="https://example.org/a">source</a>'
    assert "Bike lanes</a>" not in edited  # the title never becomes the link


def test_history_says_who_once() -> None:
    item = items.Item(1, "news", "feed", "g", "{}", "h", State.REJECTED, 1, 1,
                      "rejected by operator:7", NOW, NOW, None)  # fmt: skip
    trail = [events.Event(1, "item", "1", "awaiting_approval", "rejected", "operator:7", 1,
                          "rejected by operator:7", NOW, 1, "0", "1")]  # fmt: skip
    text = render.history(item, trail)
    assert text.count("operator:7") == 1 and "rejected by operator:7 (attempt 1)" in text


def test_the_wal_size_is_for_gatehouse_status_verbose_only() -> None:
    overview = operations.Overview(NOW, [status("news", paused=True)], wal_bytes=358 * 1024)
    summary = info.Info("data/gatehouse.db", 9, 358 * 1024, 0, 0, {})
    plain = cli_output.status(overview, summary, None, NOW)
    verbose = cli_output.status(overview, summary, None, NOW, verbose=True)
    assert "wal" not in plain and "wal     358 KiB" in verbose
    assert "in 14m" not in plain  # paused: no next run


def test_a_process_restarted_after_a_clean_stop_shows_no_cluster() -> None:
    """The one-process demo after a restart: its earlier self stopped cleanly, so there is
    no "1 of 2 workers alive" to read as a failure."""
    earlier = heartbeats.Worker(
        "h:1:a", "h", 1, NOW - timedelta(hours=1), NOW - timedelta(minutes=30),
        NOW - timedelta(minutes=30),
    )  # fmt: skip
    now_running = heartbeats.Worker("h:2:b", "h", 2, NOW - timedelta(minutes=5), NOW, None)
    found = cluster.Cluster(NOW, [now_running, earlier], None, 30.0)
    assert cluster.lines(found) == []
    killed = dataclasses.replace(earlier, stopped_at=None)  # silent, not stopped: shown
    shown = cluster.lines(cluster.Cluster(NOW, [now_running, killed], None, 30.0))
    assert shown[0] == "cluster: 1 of 2 workers alive (heard from in a day)"
