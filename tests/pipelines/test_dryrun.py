"""`gatehouse dry-run` on the bundled examples: the cards they would send, and nothing kept.

The examples are copied with their URLs pointed at local servers (the feed and the
digest's webhook), and run as a user would run them: the real CLI in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.fakes.feed_server import FeedServer
from tests.fakes.webhook_server import WebhookServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "pipelines" / "examples"


def _examples(tmp_path: Path, feed_url: str, hook_url: str) -> Path:
    folder = tmp_path / "pipelines"
    shutil.copytree(EXAMPLES, folder)
    news = folder / "news.yaml"
    news.write_text(news.read_text().replace("http://127.0.0.1:8765/feeds/demo.xml", feed_url))
    digest = folder / "digest.yaml"
    digest.write_text(digest.read_text().replace("http://127.0.0.1:8766/hooks/digest", hook_url))
    return folder


def _gatehouse(tmp_path: Path, folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {
        "GATEHOUSE_PIPELINES_DIR": str(folder),
        "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
        "DIGEST_WEBHOOK_TOKEN": "hook-token",
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "gatehouse"), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_dry_run_prints_the_cards_and_keeps_nothing(tmp_path: Path) -> None:
    feed_xml = (EXAMPLES / "feeds" / "demo.xml").read_text()
    titles = re.findall(r"<item>\s*<title>([^<]+)</title>", feed_xml)
    assert len(titles) == 5
    with FeedServer() as feed, WebhookServer() as hook:
        feed.set("/demo.xml", feed_xml)
        folder = _examples(tmp_path, feed.url("/demo.xml"), hook.url)
        # The real store exists and has a paused pipeline: a dry run must leave it as it is.
        assert _gatehouse(tmp_path, folder, "init").returncode == 0
        assert _gatehouse(tmp_path, folder, "pause", "news").returncode == 0
        before = _gatehouse(tmp_path, folder, "status", "--json")

        first = _gatehouse(tmp_path, folder, "dry-run", "news", "--limit", "3")
        again = _gatehouse(tmp_path, folder, "dry-run", "news", "--json")
        digest = _gatehouse(tmp_path, folder, "dry-run", "digest")
        after = _gatehouse(tmp_path, folder, "status", "--json")
        assert hook.requests == []  # nothing dispatched
        assert len(feed.requests) == 2

    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert out.startswith("dry run of news: fetched 5, 5 new\n")
    assert [t for t in titles if t in out] == titles[:3]
    assert out.count("📝 news · item") == 3
    assert "… and 2 more not drafted (--limit 3)" in out
    assert out.rstrip().endswith("nothing was marked seen, stored or sent")
    # Nothing was marked seen: the second run finds all five again.
    shown = json.loads(again.stdout)
    assert [card["title"] for card in shown["cards"]] == titles
    assert (shown["new"], shown["undrafted"]) == (5, 0)
    assert digest.returncode == 0, digest.stderr
    assert "dry run: drafted with the template; the LLM is not called" in digest.stdout
    assert "Release 2.4 shipped" in digest.stdout
    assert json.loads(after.stdout)["store"] == json.loads(before.stdout)["store"]
    assert _counts(tmp_path / "data" / "gatehouse.db") == {
        "seen_items": 0, "items": 0, "outbox": 0, "pipeline_runs": 0, "claims": 0
    }  # fmt: skip


def _counts(db: Path) -> dict[str, int]:
    """Rows in the tables a run would write to, read from the file once every process is gone."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = ("seen_items", "items", "outbox", "pipeline_runs", "claims")
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables}
    finally:
        conn.close()


def test_dry_run_of_an_unknown_pipeline_says_which_exist(tmp_path: Path) -> None:
    folder = _examples(tmp_path, "http://127.0.0.1:9/feed.xml", "http://127.0.0.1:9/hook")
    done = _gatehouse(tmp_path, folder, "dry-run", "nwes")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gatehouse dry-run: unknown pipeline 'nwes'. Did you mean news? Pipelines: digest, news"
    )
    assert not (tmp_path / "data").exists()


def test_a_failing_source_is_reported_and_exits_1(tmp_path: Path) -> None:
    folder = _examples(tmp_path, "http://127.0.0.1:9/feed.xml", "http://127.0.0.1:9/hook")
    done = _gatehouse(tmp_path, folder, "dry-run", "news")
    assert done.returncode == 1
    first, error = done.stdout.splitlines()[:2]
    assert first == "dry run of news: fetched 0, 0 new"
    assert error.startswith("error: source demo-news: ")
    assert not (tmp_path / "data").exists()


FILTER = """
filter:
  exclude:
    - words: [rovers]
  include:
    - words: [street, road, library, rovers]
"""


def test_dry_run_prints_each_entry_s_verdict_and_rule(tmp_path: Path) -> None:
    feed_xml = (EXAMPLES / "feeds" / "demo.xml").read_text()
    titles = re.findall(r"<item>\s*<title>([^<]+)</title>", feed_xml)
    with FeedServer() as feed, WebhookServer() as hook:
        feed.set("/demo.xml", feed_xml)
        folder = _examples(tmp_path, feed.url("/demo.xml"), hook.url)
        news = folder / "news.yaml"
        news.write_text(news.read_text() + FILTER)
        text = _gatehouse(tmp_path, folder, "dry-run", "news")
        shown = _gatehouse(tmp_path, folder, "dry-run", "news", "--json")
    assert text.returncode == 0, text.stderr
    kept = [t for t in titles if re.search(r"\b(Street|Road|Library)\b", t)]
    assert len(kept) == 3
    exclude = "filter exclude #1 (words [rovers]) matched 'Rovers' in title"
    include = "filter include: no rule matched (words [street, road, library, rovers])"
    rules = {titles[3]: exclude, titles[4]: include}
    assert text.stdout.splitlines()[2:8] == [
        "filter: 2 of 5 new entries dropped",
        *(
            f"  filtered  {t[:60]}: {rules[t]}" if t in rules else f"  kept      {t}"
            for t in titles
        ),
    ]
    assert text.stdout.count("📝 news · item") == 3
    value = json.loads(shown.stdout)
    assert value["filtered"] == 2 and [c["title"] for c in value["cards"]] == kept
    assert value["verdicts"] == [
        {"title": t, "verdict": "filtered" if t in rules else "kept", "rule": rules.get(t)}
        for t in titles
    ]
