"""What the operator reads: Telegram (HTML) and CLI (plain tables) views of one real store.

One store holds an item awaiting approval, two budgets, an uncertain hold and a green
then a red run; each rendering is compared with the exact text an operator sees.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from bot.chat import render
from bot.cli import output as cli_output
from pipelines import operations
from pipelines.approval import flow, rule
from store import db, drafts, items, ledger
from store.intake import runs
from store.items.machine import State
from store.review.followups import Shown

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AGO = {n: NOW - timedelta(hours=n) for n in (1, 2, 3, 5)}


@pytest.fixture
async def world(store: db.Store) -> AsyncIterator[db.Store]:
    item = await store.write(
        items.create_sync, "news", "feed", "guid-1", {"title": "Tom & <Jerry>"}, AGO[3]
    )
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, "system", AGO[3])

    def unit(conn: sqlite3.Connection) -> None:
        drafts.add_sync(conn, item.id, drafts.Body("text", {"drafter": "template"}), AGO[2])
        items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", AGO[2])

    await store.write(unit)
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", NOW)
    await ledger.set_budget(store, ledger.Limit("news", "month", 2_000_000), "cli", NOW)
    work = await ledger.begin(
        store,
        ledger.Call("k", "chat", {"p": 1}, 50_000, "news", item.id, timedelta(minutes=5)),
        AGO[1],
    )
    await ledger.start_provider(store, work.id, AGO[1])
    await ledger.fail(store, work.id, "timeout after sending", AGO[1])
    ok = await runs.start_run(store, "news", "schedule", AGO[5])
    await runs.finish_run(
        store, ok, "ok", runs.Counts(3, 2, 2, 0), None, AGO[5] + timedelta(seconds=4)
    )
    bad = await runs.start_run(store, "news", "manual", NOW - timedelta(minutes=30))
    await runs.finish_run(
        store,
        bad,
        "error",
        runs.Counts(),
        "feed answered 503 <Unavailable>",
        NOW - timedelta(minutes=29),
    )
    yield store


async def test_budget_with_an_uncertain_hold(world: db.Store) -> None:
    report = await operations.budget(world, NOW)
    assert render.budget(report, NOW) == (
        "<b>budgets</b>\n"
        "<b>global</b> ░░░░░ 0% of $10.00 today\n"
        "  $0.00 spent · $0.05 held · $9.95 left\n"
        "<b>news</b> ░░░░░ 0% of $2.00 this month\n"
        "  $0.00 spent · $0.05 held · $1.95 left\n"
        "\n⚠️ <b>1 uncertain hold</b> (settle: the alert's Not charged / Charged, or gatehouse "
        "reconcile-claim --uncertain):\n"
        "• claim 1 news item 1 (waiting for approval): $0.05 since 1 h ago; timeout after sending"
    )
    assert cli_output.budget(report, NOW) == (
        "scope   period  spent  held   remaining  limit   used\n"
        "global  day     $0.00  $0.05  $9.95      $10.00  0%\n"
        "news    month   $0.00  $0.05  $1.95      $2.00   0%\n"
        "\n1 uncertain hold (settle: gatehouse reconcile-claim --uncertain or <claim>):\n"
        "claim  pipeline  item  reserved  since    reason\n"
        "    1  news         1  $0.05     1 h ago  timeout after sending"
    )


async def test_runs_with_the_last_green_and_the_first_red(world: db.Store) -> None:
    found = await operations.pipeline_runs(world, "news", NOW)
    assert render.status_pipeline(found, NOW) == (
        "<b>news</b>: last 2 runs, newest first\n"
        "  #2 manual: 🔴 error 30 min ago: 0 new of 0: "
        "feed answered 503 &lt;Unavailable&gt;\n"
        "  #1 schedule: 🟢 ok 5 h ago: 2 new of 3: 2 drafted\n"
        "last green: #1 5 h ago\n"
        "first red after it: #2 30 min ago"
    )
    assert cli_output.pipeline_runs(found, NOW) == (
        "news: last 2 runs, newest first\n"
        "run  trigger   status  started               took   fetched  new  filtered  skipped"
        "  drafted  failed  error\n"
        "#2   manual    error   2026-11-30 11:30 UTC  1 min        0    0         0        0"
        "        0       0  feed answered 503 <Unavailable>\n"
        "#1   schedule  ok      2026-11-30 07:00 UTC  4 s          3    2         0        0"
        "        2       0\n"
        "last green: #1 5 h ago\n"
        "first red after it: #2 30 min ago"
    )
    overview = render.status_overview(await operations.overview(world, ["news"], NOW))
    # The worst news first, and nothing about the store's internals.
    assert overview == (
        "<b>gatehouse</b> · 1 uncertain hold · 1 failed run · 1 waiting\n\n<b>news</b>\n"
        "  last run 🔴 error 30 min ago: 0 new of 0: "
        "feed answered 503 &lt;Unavailable&gt;\n"
        "  next run not scheduled\n"
        "  1 item waiting"
    )


async def test_pending_and_history(world: db.Store) -> None:
    waiting = await operations.pending(world)
    assert render.pending(waiting, NOW) == (
        "<b>1 item waiting for approval</b>, oldest first\n"
        "• <b>1</b> news v1 · 2 h: Tom &amp; &lt;Jerry&gt;"
    )
    assert cli_output.pending(waiting, NOW) == (
        "item  pipeline  version  waiting  title\n   1  news      v1       2 h      Tom & <Jerry>"
    )
    found = await operations.history(world, 1)
    assert render.history(found.item, found.events) == (
        "<b>item 1</b> (news): waiting for approval\n"
        "<i>2026-11-30 (UTC)</i>\n"
        "  09:00 new by system (attempt 1): fetched\n"
        "  09:00 drafting by system (attempt 1)\n"
        "  10:00 waiting for approval by system (attempt 1)"
    )
    assert cli_output.history(found) == (
        "item 1 (news): awaiting_approval, attempt 1\n"
        "event  at     from      to                 by      attempt  reason\n"
        "2026-11-30 (UTC)\n"
        "    1  09:00  ·         new                system        1  fetched\n"
        "    2  09:00  new       drafting           system        1\n"
        "    3  10:00  drafting  awaiting_approval  system        1"
    )


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0 s ago"), (59, "59 s ago"), (60, "1 min ago"), (3599, "59 min 59 s ago"),
     (5400, "1 h 30 min ago"), (48 * 3600 - 1, "1 d 23 h ago"), (48 * 3600, "2 d ago"),
     (-120, "in 2 min")],
)  # fmt: skip
def test_ages_read_naturally(seconds: int, shown: str) -> None:
    assert render.age(NOW - timedelta(seconds=seconds), NOW) == shown
    assert render.age(None, NOW) == "never"


async def test_history_names_the_rejecting_operator_once_per_line(world: db.Store) -> None:
    await world.write(
        flow.decide_sync, rule.Vote(Shown(1, 1, 1), 7, "reject", reason="too long"), NOW
    )
    found = await operations.history(world, 1)
    last = render.history(found.item, found.events).splitlines()[-1]
    assert last.endswith("rejected by operator:7 (attempt 1): too long"), last
    assert last.count("operator:7") == 1
    row = next(r for r in cli_output.history(found, {7: "Ann"}).splitlines() if "too long" in r)
    assert row.count("Ann") == 1 and row.endswith("too long"), row
