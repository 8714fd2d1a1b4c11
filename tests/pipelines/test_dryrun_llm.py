"""`gatehouse dry-run --llm`: LLM drafts through the budget ledger, limited to what the
real budgets have left, with their cost in the report; the real store is left alone."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from store import ledger, units
from tests import running
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.fakes.llm_server import FakeLLM

PIPELINE = """\
name: news
schedule: manual
sources:
  - type: rss
    url: {feed}
    scope: news
draft:
  drafter: llm
  prompt: prompt.txt
  max_tokens: 50
dispatch:
  type: none
"""
PRICES = {"fake-model": {"input_micros_per_mtok": 3_000_000, "output_micros_per_mtok": 9_000_000}}
STORIES = [("a1", "Bridge reopens", "The bridge reopens on Monday."), ("a2", "Fair", "It rains.")]


@pytest.fixture
def servers() -> Iterator[tuple[FeedServer, FakeLLM]]:
    with FeedServer() as feed, FakeLLM(api_key="test-key") as llm:
        feed.set("/feed.xml", rss(STORIES))
        yield feed, llm


def gatehouse(
    tmp_path: Path,
    feed: FeedServer,
    llm: FakeLLM,
    *argv: str,
    unset: tuple[str, ...] = (),
    pipeline: str = PIPELINE,
) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "pipelines"
    folder.mkdir(exist_ok=True)
    (folder / "news.yaml").write_text(pipeline.format(feed=feed.url("/feed.xml")))
    (folder / "prompt.txt").write_text("Write a post.\n{title}\n{text}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {
        "GATEHOUSE_PIPELINES_DIR": str(folder),
        "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
        "GATEHOUSE_LLM__KIND": "openai",
        "GATEHOUSE_LLM__BASE_URL": llm.base_url,
        "GATEHOUSE_LLM__API_KEY": "test-key",
        "GATEHOUSE_LLM__MODEL": "fake-model",
        "GATEHOUSE_PRICES": json.dumps(PRICES),
    }
    env = {k: v for k, v in env.items() if k not in unset}
    return subprocess.run(
        [str(Path(sys.executable).parent / "gatehouse"), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = ("claims", "items", "llm_outputs", "seen_items")
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        conn.close()


def test_llm_drafts_are_paid_through_the_ledger_and_the_report_says_what_they_cost(
    tmp_path: Path, servers: tuple[FeedServer, FakeLLM]
) -> None:
    feed, llm = servers
    assert gatehouse(tmp_path, feed, llm, "init").returncode == 0
    budget = gatehouse(tmp_path, feed, llm, "set-budget", "global", "day", "1")
    assert budget.returncode == 0, budget.stderr

    done = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--llm", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert llm.calls == 2
    assert [card["drafter"] for card in report["cards"]] == ["llm", "llm"]
    costs = [card["cost_micros"] for card in report["cards"]]
    assert all(cost > 0 for cost in costs)
    assert report["llm"]["drafts"] == 2 and report["llm"]["uncertain_micros"] == 0
    assert report["llm"]["spent_micros"] == sum(costs)

    # The provider billed the drafts: their cost counts against the store's budgets.
    assert report["llm"]["counted"] == {"claim": 1}
    budget = json.loads(gatehouse(tmp_path, feed, llm, "budget", "--json").stdout)
    assert [b["spent_micros"] for b in budget["budgets"]] == [sum(costs)]

    text = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--llm")
    assert text.returncode == 0, text.stderr
    # The same drafts cost the same: the plain text says it as a person reads money.
    assert f"LLM: 2 draft(s) through the budget ledger, cost {units.money(sum(costs))}\n" in (
        text.stdout
    )
    assert "counted against the store's budgets as claim 2" in text.stdout
    assert llm.calls == 4
    # The real store holds the budget and the spend, nothing else: no item or output.
    assert counts(tmp_path / "data" / "gatehouse.db") == {
        "claims": 2, "items": 0, "llm_outputs": 0, "seen_items": 0
    }  # fmt: skip
    conn = sqlite3.connect(f"file:{tmp_path / 'data' / 'gatehouse.db'}?mode=ro", uri=True)
    try:
        claim = conn.execute(
            "SELECT state, item_id, actual_micros, evidence FROM claims WHERE id = 1"
        ).fetchone()
    finally:
        conn.close()
    assert claim[:3] == ("settled", None, sum(costs))
    assert claim[3].startswith("dry run of news: 2 draft(s); requests req_fake_")


def test_limit_bounds_the_provider_calls_to_the_newest_items(
    tmp_path: Path, servers: tuple[FeedServer, FakeLLM]
) -> None:
    feed, llm = servers
    six = [(f"s{n}", f"Story {n}", f"What happened {n}.") for n in range(1, 7)]
    # Not in date order: the newest two are the fifth and the third.
    days = ["02", "01", "05", "03", "06", "04"]
    feed.set("/feed.xml", rss(six, dates=[f"Tue, {d} Jun 2026 08:00:00 GMT" for d in days]))
    assert gatehouse(tmp_path, feed, llm, "init").returncode == 0
    assert gatehouse(tmp_path, feed, llm, "set-budget", "global", "day", "1").returncode == 0

    done = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--limit", "2", "--llm", "--json")
    assert done.returncode == 0, done.stderr
    assert llm.calls == 2
    report = json.loads(done.stdout)
    assert [card["title"] for card in report["cards"]] == ["Story 5", "Story 3"]
    assert (report["fetched"], report["new"], report["undrafted"]) == (6, 6, 4)
    assert report["llm"]["drafts"] == 2

    text = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--limit", "2", "--llm")
    assert text.returncode == 0, text.stderr
    assert llm.calls == 4
    assert text.stdout.startswith("dry run of news: fetched 6, 6 new\n")
    assert "… and 4 more not drafted (--limit 2)" in text.stdout
    assert "LLM: 2 draft(s) through the budget ledger" in text.stdout


def test_without_llm_or_without_a_budget_nothing_is_spent(
    tmp_path: Path, servers: tuple[FeedServer, FakeLLM]
) -> None:
    feed, llm = servers
    free = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--json")
    assert free.returncode == 0, free.stderr
    report = json.loads(free.stdout)
    assert report["llm"] is None
    assert {card["drafter"] for card in report["cards"]} == {"template"}
    assert "add --llm to call it" in report["cards"][0]["note"]

    # --llm, but no budget is set: asked for the LLM, a template run is refused, not shown.
    unbudgeted = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--llm", "--json")
    assert (unbudgeted.returncode, unbudgeted.stdout) == (2, "")
    assert "--llm: no budget covers 'news'; set one with `gatehouse set-budget news" in (
        unbudgeted.stderr
    )
    assert llm.calls == 0


@pytest.mark.parametrize(
    ("unset", "missing"),
    [
        (
            tuple(f"GATEHOUSE_LLM__{k}" for k in ("KIND", "BASE_URL", "API_KEY", "MODEL")),
            "no LLM provider configured (GATEHOUSE_LLM__*)",
        ),
        (("GATEHOUSE_PRICES",), "no price for model 'fake-model' in GATEHOUSE_PRICES"),
    ],
)
def test_llm_without_a_provider_or_price_says_what_is_missing(
    tmp_path: Path, servers: tuple[FeedServer, FakeLLM], unset: tuple[str, ...], missing: str
) -> None:
    feed, llm = servers
    done = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--llm", unset=unset)
    assert (done.returncode, done.stdout) == (2, "")
    assert f"gatehouse dry-run: --llm: {missing}; nothing was drafted" in done.stderr
    assert llm.calls == 0


def test_a_dry_run_never_spends_past_what_the_budget_has_left(
    tmp_path: Path, servers: tuple[FeedServer, FakeLLM]
) -> None:
    feed, llm = servers
    # Less than one call's worst case: the ledger refuses before the provider is called.
    assert gatehouse(tmp_path, feed, llm, "init").returncode == 0
    assert gatehouse(tmp_path, feed, llm, "set-budget", "news", "day", "0.0001").returncode == 0
    done = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--llm", "--json")
    report = json.loads(done.stdout)
    assert llm.calls == 0
    assert report["cards"] == [] and report["llm"]["spent_micros"] == 0
    assert done.returncode == 1
    assert len(report["failed"]) == 2
    assert all(f["reason"].startswith("budget: budget exceeded") for f in report["failed"])


async def test_while_the_bot_runs_the_spend_is_counted_through_its_control_socket(
    tmp_path: Path, servers: tuple[FeedServer, FakeLLM]
) -> None:
    feed, llm = servers
    (tmp_path / "empty").mkdir()
    with tempfile.TemporaryDirectory(prefix="gh-", dir="/tmp") as name:
        data_dir = Path(name) / "data"
        data_dir.mkdir(mode=0o700)
        async with running.with_control(data_dir, tmp_path / "empty") as bot:
            now = datetime.now(UTC)
            await ledger.set_budget(bot.store, ledger.Limit("global", "day", 1_000_000), "cli", now)
            done = await asyncio.to_thread(
                gatehouse, tmp_path, feed, llm, "--data-dir", str(data_dir), "dry-run", "news",
                "--llm", "--json",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout)
            assert report["llm"]["counted"] == {"claim": 1}
            spent = await ledger.report(bot.store, datetime.now(UTC))
            assert [b.spent_micros for b in spent.budgets] == [report["llm"]["spent_micros"]]


TRIAGED = PIPELINE.replace(
    "draft:\n", 'triage:\n  question: "Is this about a bridge?"\n  threshold: 0.5\ndraft:\n'
)


def triage_answer(text: str) -> str | None:
    """The fake model's triage: the bridge story scores high, the other low; drafts as usual."""
    if not text.startswith("Question:"):
        return None
    score = 0.9 if "reopens" in text.lower() else 0.1
    return json.dumps({"score": score, "reason": "about a bridge" if score > 0.5 else "no"})


def test_a_dry_run_counts_its_triage_calls_apart_from_its_drafts(
    tmp_path: Path, servers: tuple[FeedServer, FakeLLM]
) -> None:
    feed, llm = servers
    llm.answer = triage_answer
    assert gatehouse(tmp_path, feed, llm, "init", pipeline=TRIAGED).returncode == 0
    budget = gatehouse(tmp_path, feed, llm, "set-budget", "global", "day", "1", pipeline=TRIAGED)
    assert budget.returncode == 0, budget.stderr
    done = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--llm", "--json", pipeline=TRIAGED)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    # Two entries triaged, one of them drafted: three calls, one a draft.
    assert llm.calls == 3
    assert report["llm"]["drafts"] == 1 and report["llm"]["calls"] == 3
    draft = report["cards"][0]["cost_micros"]
    assert report["llm"]["draft_micros"] == draft < report["llm"]["spent_micros"]
    text = gatehouse(tmp_path, feed, llm, "dry-run", "news", "--llm", pipeline=TRIAGED)
    assert text.returncode == 0, text.stderr
    spent, triage = report["llm"]["spent_micros"], report["llm"]["spent_micros"] - draft
    assert (
        f"LLM: 1 draft(s) and 2 triage call(s) through the budget ledger, cost "
        f"{units.money(spent)} ({units.money(draft)} for the drafts, "
        f"{units.money(triage)} for the triage)\n"
    ) in text.stdout, text.stdout
