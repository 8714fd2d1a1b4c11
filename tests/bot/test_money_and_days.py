"""Money and moments as a person reads them: rounded on cards and lists, exact where an
amount is acted on (/budget's detail, --json), and a history's date said once per day.

One real store holds a budget with a spend of $0.065231 and an item whose events span
two days; each view is compared with the text an operator reads.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.chat import alerts, card_text, render
from bot.cli import output as cli_output
from pipelines import operations
from store import db, items, ledger, payloads, units
from store.items.machine import State
from store.ledger import prices

NOW = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)


async def test_a_card_says_its_cost_to_two_figures() -> None:
    payload = {"pipeline": "news", "text": "Body", "version": 1, "attempt": 1,
               "drafter": "llm", "cost_micros": 13_088}  # fmt: skip
    assert "cost $0.013</i>" in card_text.card(1, payload)
    assert "cost 0.28¢</i>" in card_text.card(1, payload | {"cost_micros": 2_800})


async def test_budget_rounds_the_summary_and_says_the_exact_amounts_once(
    store: db.Store,
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 5_000_000), "cli", NOW)
    work = await ledger.begin(
        store, ledger.Call("k", "chat", {"p": 1}, 100_000, "news", None, timedelta(minutes=5)), NOW
    )
    await ledger.start_provider(store, work.id, NOW)
    await ledger.complete(
        store, work.id, ledger.Actual(65_231, "req-1", prices.Usage(10, 10)), None, NOW
    )
    report = await operations.budget(store, NOW)
    assert render.budget(report, NOW) == (
        "<b>budgets</b>\n"
        "<b>global</b> ░░░░░ 1% of $5.00 today\n"
        "  $0.065 spent · $4.93 left\n"
        "  <i>exact: $0.065231 spent · $4.934769 left</i>\n"
        "no uncertain holds"
    )
    assert cli_output.budget(report, NOW) == (
        "scope   period  spent   held   remaining  limit  used\n"
        "global  day     $0.065  $0.00  $4.93      $5.00  1%\n"
        "(rounded: gatehouse budget --json gives each amount in micro-dollars)\n"
        "no uncertain holds"
    )
    plain = json.loads(json.dumps(operations.plain(report)))
    assert plain["budgets"][0]["spent_micros"] == 65_231


def test_a_budget_alert_reads_rounded() -> None:
    alert = payloads.Alert(
        about="budget_threshold",
        facts={"budget": "global/day", "pct": 80, "spent_micros": 4_013_088,
               "limit_micros": 5_000_000, "held_micros": 13_088},
    )  # fmt: skip
    assert alerts.text(alert).endswith("spent $4.01 of $5.00 ($0.013 held)")


async def test_a_history_says_each_date_once(store: db.Store) -> None:
    day1 = datetime(2026, 12, 1, 23, 50, tzinfo=UTC)
    item = await store.write(items.create_sync, "news", "feed", "g1", {"title": "T"}, day1)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, "system", day1)
    await store.write(
        items.transition_sync, item.id, State.FAILED, "system", NOW, reason="bad output"
    )
    found = await operations.history(store, item.id)
    assert render.history(found.item, found.events) == (
        "<b>item 1</b> (news): failed\n"
        "<i>2026-12-01 (UTC)</i>\n"
        "  23:50 new by system (attempt 1): fetched\n"
        "  23:50 drafting by system (attempt 1)\n"
        "<i>2026-12-02 (UTC)</i>\n"
        "  09:30 failed by system (attempt 1): bad output"
    )
    lines = cli_output.history(found).splitlines()
    assert lines[2] == "2026-12-01 (UTC)" and lines[5] == "2026-12-02 (UTC)", lines
    assert "UTC" not in "".join(lines[3:5] + lines[6:])


@pytest.mark.parametrize(
    ("micros", "shown"),
    [(0, "$0.00"), (28, "0.0028¢"), (4_999, "0.5¢"), (9_949, "0.99¢"), (9_999, "$0.01"),
     (13_088, "$0.013"), (65_231, "$0.065"), (150_000, "$0.15"), (4_934_769, "$4.93"),
     (1_234_567_890, "$1,234.57"), (-50_000, "-$0.05")],
)  # fmt: skip
def test_money_to_two_figures_and_the_cent(micros: int, shown: str) -> None:
    assert units.money(micros) == shown
