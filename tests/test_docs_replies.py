"""Every reply the docs quote is the product's own: each fenced block whose info string is
`reply <scenario>` (in README.md, docs/operations.md, docs/troubleshooting.md) must equal,
line for line, what the product says in that scenario, built here with a real store and
rendered with the product's own function (chat HTML read as Telegram shows it: tags
dropped, entities unescaped).

    ```reply status
    gatehouse · ✅ all well · 4 waiting
    ...
    ```

A block naming no known scenario fails, and so does a reply-shaped block left unmarked.
"""

from __future__ import annotations

import html
import re
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.chat import alerts, render
from pipelines import operations
from pipelines.config import spec
from store import db, drafts, items, ledger, payloads
from store.intake import runs, timetable
from store.items.machine import State
from store.ledger import prices

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "operations.md", ROOT / "docs" / "troubleshooting.md"]
BLOCK = re.compile(r"^```reply ([a-z-]+)\n(.*?)^```$", re.M | re.S)
NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
TITLES = [
    "Library extends weekend opening hours",
    "Water main repair closes Elm Road until Friday",
    "Council approves new cycle lanes",
    "School term starts a week later",
]


def shown(text: str) -> str:
    """Telegram HTML as a person reads it."""
    return html.unescape(re.sub(r"<[^>]+>", "", text))


async def waiting_items(store: db.Store) -> None:
    """Four news items awaiting approval since 4 s ago, after a run 4 s ago."""
    at = NOW - timedelta(seconds=4)
    for n, title in enumerate(TITLES):
        item = await store.write(items.create_sync, "news", "feed", f"g{n}", {"title": title}, at)
        assert item is not None
        await store.write(items.transition_sync, item.id, State.DRAFTING, "system", at)

        def unit(conn: sqlite3.Connection, item_id: int = item.id) -> None:
            drafts.add_sync(conn, item_id, drafts.Body("text", {"drafter": "template"}), at)
            items.transition_sync(conn, item_id, State.AWAITING_APPROVAL, "system", at)

        await store.write(unit)
    run = await runs.start_run(store, "news", "schedule", at)
    counts = runs.Counts(fetched=5, new=5, drafted=4, filtered=1)
    await runs.finish_run(store, run, "ok", counts, None, at)
    await timetable.ensure(store, "news", NOW + timedelta(minutes=14))


async def status(store: db.Store, tmp_path: Path) -> str:
    await waiting_items(store)
    return shown(render.status_overview(await operations.overview(store, ["news"], NOW)))


async def pending(store: db.Store, tmp_path: Path) -> str:
    await waiting_items(store)
    return shown(render.pending(await operations.pending(store), NOW))


async def budget(store: db.Store, tmp_path: Path) -> str:
    await ledger.set_budget(store, ledger.Limit("global", "day", 5_000_000), "cli", NOW)
    work = await ledger.begin(
        store,
        ledger.Call("k", "chat", {"p": 1}, 4_000_000, "news", None, timedelta(minutes=5)),
        NOW,
    )
    await ledger.start_provider(store, work.id, NOW)
    await ledger.complete(
        store, work.id, ledger.Actual(3_104_312, "req-1", prices.Usage(10, 10)), None, NOW
    )
    return shown(render.budget(await operations.budget(store, NOW), NOW))


async def budget_alert(store: db.Store, tmp_path: Path) -> str:
    facts = {"budget": "global/day from 2026-12-04", "pct": 100, "spent_micros": 5_000_000,
             "limit_micros": 5_000_000, "held_micros": 0}  # fmt: skip
    return alerts.text(payloads.Alert(about="budget_threshold", facts=facts))


async def unclosed_quote(store: db.Store, tmp_path: Path) -> str:
    folder = tmp_path / "pipelines" / "mine"
    folder.mkdir(parents=True)
    (folder / "city.yaml").write_text(
        'name: city\nschedule: 15m\nsources:\n  - type: rss\n    url: "https://example.org/x\n'
        "draft:\n  drafter: template\n"
    )
    [error] = spec.check(folder)
    return str(error).replace(str(tmp_path) + "/", "")


async def history(store: db.Store, tmp_path: Path) -> str:
    day = NOW - timedelta(days=1, hours=1)
    item = await store.write(items.create_sync, "news", "feed", "g", {"title": "T"}, day)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, "system", day)
    await store.write(items.transition_sync, item.id, State.FAILED, "system", NOW,
                      reason="the provider answered 500")  # fmt: skip
    found = await operations.history(store, item.id)
    return shown(render.history(found.item, found.events))


SCENARIOS: dict[str, Callable[[db.Store, Path], Awaitable[str]]] = {
    "status": status,
    "pending": pending,
    "budget": budget,
    "budget-alert": budget_alert,
    "unclosed-quote": unclosed_quote,
    "history": history,
}


def quoted() -> list[tuple[str, str, str]]:
    """(file, scenario, quoted text) of every reply block in the docs."""
    return [
        (doc.name, found.group(1), found.group(2).rstrip("\n"))
        for doc in DOCS
        for found in BLOCK.finditer(doc.read_text(encoding="utf-8"))
    ]


def test_the_docs_quote_replies_and_name_known_scenarios() -> None:
    found = quoted()
    assert {name for name, _, _ in found} >= {"operations.md", "troubleshooting.md"}
    unknown = [(name, scenario) for name, scenario, _ in found if scenario not in SCENARIOS]
    assert not unknown, f"reply blocks naming no scenario of this test: {unknown}"


def test_no_reply_is_quoted_unmarked() -> None:
    """A fenced block that opens as a reply does (the /status or /budget heading) is marked."""
    for doc in DOCS:
        plain = re.findall(r"^```\n(.*?)^```$", doc.read_text(encoding="utf-8"), re.M | re.S)
        starts = [block.split("\n", 1)[0] for block in plain]
        bare = [s for s in starts if s.startswith(("gatehouse ·", "budgets", "Budget "))]
        assert not bare, f"{doc.name}: unmarked replies {bare}: mark them ```reply <scenario>"


@pytest.mark.parametrize(("doc", "scenario", "text"), quoted())
async def test_a_quoted_reply_is_what_the_product_says(
    store: db.Store, tmp_path: Path, doc: str, scenario: str, text: str
) -> None:
    said = await SCENARIOS[scenario](store, tmp_path)
    assert text == said, f"{doc} quotes ```reply {scenario} unlike the product:\n{said}"


def test_the_first_pipeline_types_one_command_the_same_way_throughout() -> None:
    """Each step of the README's first pipeline runs `.venv/bin/gatehouse` as typed (a bare
    `gatehouse` is "command not found" without the venv activated)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Your first pipeline", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^ {4}(\S*gatehouse) ", section, re.M)
    commands += re.findall(r"`(\S*gatehouse) (?:dry-run|run|init|set-budget|check)\b", section)
    assert commands, "the first pipeline runs no gatehouse command"
    assert set(commands) == {".venv/bin/gatehouse"}, commands
