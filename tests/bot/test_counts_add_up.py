"""Counts that add up: a run's line names every outcome of its new entries, and points to
the chat command that lists each dropped kind (/filtered, /skipped), not to a terminal.

One real store holds a run of 10 new entries (2 filtered, 3 skipped by triage, 5
drafted) and today's dropped items; each view is compared with the text an operator reads.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.chat import lists, render
from bot.cli import output as cli_output
from bot.commands import handlers
from pipelines import operations
from store import db, items
from store.intake import runs
from store.items.machine import State

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
EARLY = NOW - timedelta(hours=2)


@pytest.fixture
async def world(store: db.Store) -> db.Store:
    for n in range(2):
        item = await store.write(
            items.create_sync, "news", "feed", f"f{n}", {"title": f"Ad {n}"}, EARLY
        )
        assert item is not None
        await store.write(
            items.transition_sync, item.id, State.FILTERED, "system", EARLY,
            reason="word: sponsored",
        )  # fmt: skip
    for n in range(3):
        item = await store.write(
            items.create_sync, "news", "feed", f"s{n}", {"title": f"Off {n}"}, EARLY
        )
        assert item is not None
        await store.write(items.transition_sync, item.id, State.DRAFTING, "system", EARLY)
        await store.write(
            items.transition_sync, item.id, State.SKIPPED, "system", EARLY,
            reason="triage 0.10: off topic",
        )  # fmt: skip
    run = await runs.start_run(store, "news", "schedule", EARLY)
    counts = runs.Counts(fetched=10, new=10, drafted=5, failed=0, filtered=2, skipped=3)
    await runs.finish_run(store, run, "ok", counts, None, EARLY + timedelta(seconds=4))
    return store


async def test_status_names_every_outcome_and_where_each_list_is(world: db.Store) -> None:
    overview = render.status_overview(await operations.overview(world, ["news"], NOW))
    assert (
        "  last run 🟢 ok 2 h ago: 10 new of 10: 2 filtered, 3 skipped by triage, 5 drafted\n"
        "  lists: /filtered news · /skipped news\n"
    ) in overview
    found = await operations.pipeline_runs(world, "news", NOW)
    text = render.status_pipeline(found, NOW)
    assert text.endswith(
        "last green: #1 2 h ago\n2 filtered today: /filtered news\n3 skipped today: /skipped news"
    ), text
    assert "gatehouse" not in text
    # A terminal is pointed to the terminal's commands, and its table has every outcome.
    plain = cli_output.pipeline_runs(found, NOW)
    assert plain.endswith("2 filtered today: gatehouse filtered news\n"
                          "3 skipped today: gatehouse skipped news"), plain  # fmt: skip
    assert "filtered  skipped  drafted" in plain


def test_entries_not_settled_yet_are_counted_too() -> None:
    counts = runs.Counts(fetched=4, new=4, drafted=1, filtered=1)
    assert render.run_counts(counts) == "4 new of 4: 1 filtered, 1 drafted, 2 not drafted yet"


async def test_filtered_lists_in_chat_what_the_filter_dropped(world: db.Store) -> None:
    found = await operations.filtered(world, "news", lists.FILTERED_SHOWN + 1)
    assert render.filtered("news", found, NOW, more=False) == (
        "<b>news</b>: 2 filtered, newest first\n"
        "• #2 Ad 1 (2 h ago)\n    <i>word: sponsored</i>\n"
        "• #1 Ad 0 (2 h ago)\n    <i>word: sponsored</i>\n"
        "Bring one back past the filter with /replay &lt;item&gt;."
    )
    assert ("filtered", "<pipeline>") in handlers.ARGUMENTS.items()
    assert "filtered" in dict(handlers.COMMANDS)
