"""End to end with metrics, the HTTP trigger and JSON logs on: the real bot process
against the local Bot API server and a feed. A feed item is approved and dispatched,
an item handed over by HTTP reaches a card, then /metrics is checked against the store
and every log line against the JSON format, with no secret in it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import parser

from bot.demo.botapi import localapi
from bot.web import metrics
from store import db
from tests.bot.test_api import free_port
from tests.e2e.test_bot_e2e import (
    OPERATOR,
    PIPELINE,
    TOKEN,
    BotProcess,
    cards,
    tap,
    two_cards,
    version_of,
)
from tests.fakes.feed_server import FeedServer


class Observed(BotProcess):
    def __init__(self, tmp: Path, api: localapi.LocalBotApi) -> None:
        super().__init__(tmp, api)
        self.metrics = f"127.0.0.1:{free_port()}"
        self.trigger = f"127.0.0.1:{free_port()}"
        self.env.update(
            GATEHOUSE_METRICS__LISTEN=self.metrics,
            GATEHOUSE_API__LISTEN=self.trigger,
            GATEHOUSE_LOG_FORMAT="json",
        )

    def cli(self, *args: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", *args, "--json"],
            cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return json.loads(done.stdout)


@pytest.fixture
def observed(tmp_path: Path, api: localapi.LocalBotApi, feed: FeedServer) -> Iterator[Observed]:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "news.yaml").write_text(
        PIPELINE.format(url=feed.url("/feed.xml"), out=tmp_path / "out")
    )
    process = Observed(tmp_path, api)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"http://{address}/metrics", timeout=10).text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
    }


async def store_figures(data: Path) -> dict[str, Any]:
    """The same figures, counted straight from the store's tables."""
    store = await db.open(db.StoreConfig(data_dir=data), readonly=True)

    def counts(conn: Any) -> dict[str, Any]:
        one = lambda sql: conn.execute(sql).fetchall()  # noqa: E731
        return {
            "items": dict(one("SELECT state, count(*) FROM items GROUP BY state")),
            "runs": dict(one("SELECT status, count(*) FROM pipeline_runs GROUP BY status")),
            "fetched": one("SELECT sum(fetched), sum(new), sum(drafted) FROM pipeline_runs")[0],
            "pending": dict(
                one("SELECT kind, count(*) FROM outbox WHERE state = 'pending' GROUP BY kind")
            ),
        }

    try:
        return await store.read(counts)
    finally:
        await store.close()


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_trigger_and_json_logs_end_to_end(
    observed: Observed, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first, _ = two_cards(api)
    assert tap(api, OPERATOR, first, "Approve")["text"] == "✅ approved"
    version_of(api, first.message_id, 2)
    api.wait_for(lambda: list((tmp_path / "out").glob("news-*.md")), timeout=30)

    secret = observed.cli("token", "create", "ci")["token"]
    api.fail_next("sendMessage", 429, retry_after=1)  # the handed-over item's card meets it
    answer = httpx.post(
        f"http://{observed.trigger}/v1/pipelines/news/items",
        json={"id": "hook-1", "title": "Handed over by HTTP", "text": "From another system."},
        headers={"Authorization": f"Bearer {secret}", "Idempotency-Key": "e2e-1"},
        timeout=10,
    )
    assert answer.status_code == 202, answer.text
    card = api.wait_for(
        lambda: [m for m in cards(api) if "Handed over by HTTP" in m.text], timeout=60
    )[0]
    assert f"item {answer.json()['item']}" in card.text

    # Once the run that drafted it has ended and nothing waits, the figures hold still.
    for _ in range(100):
        found, stored = scrape(observed.metrics), asyncio.run(store_figures(data))
        if "running" not in stored["runs"] and not stored["pending"]:
            break
        time.sleep(0.2)
    time.sleep(metrics.MIN_READ_INTERVAL_S)  # the next scrape reads the store again
    found = scrape(observed.metrics)
    for state in ("awaiting_approval", "dispatched"):
        assert (
            value(found, "gatehouse_items", pipeline="news", state=state) == stored["items"][state]
        )
    assert sum(v for (n, _), v in found.items() if n == "gatehouse_items") == 3
    assert (
        value(found, "gatehouse_runs_total", pipeline="news", status="ok") == stored["runs"]["ok"]
    )
    fetched, new, drafted = stored["fetched"]
    # Two runs fetched the feed (the second found nothing new) and drafted all three items:
    # a handed-over item is recorded by the trigger, never fetched by a run.
    assert (fetched, new, drafted) == (4, 2, 3)
    assert value(found, "gatehouse_items_fetched_total", pipeline="news") == fetched
    assert value(found, "gatehouse_items_new_total", pipeline="news") == new
    assert value(found, "gatehouse_items_drafted_total", pipeline="news") == drafted
    for kind in ("card", "card_edit", "alert", "dispatch"):
        assert value(found, "gatehouse_outbox_pending", kind=kind) == stored["pending"].get(kind, 0)
    assert (
        value(found, "gatehouse_decision_seconds_count", pipeline="news", decision="approved") == 1
    )
    assert value(found, "gatehouse_telegram_errors_total", kind="rate_limited") >= 1
    assert value(found, "gatehouse_store_write_seconds_count") > 0
    assert value(found, "gatehouse_store_wal_bytes") > 0
    assert value(found, "gatehouse_leader") == 1
    assert value(found, "gatehouse_worker_running", worker="api") == 1
    assert value(found, "gatehouse_worker_running", worker="metrics") == 1
    assert not any(  # no unbounded label values: no item ids, no texts
        key in ("item", "id", "title") for _, labels in found for key, _ in labels
    )

    observed.stop()
    log = observed.log.read_text()
    assert TOKEN not in log and secret not in log
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    ended = [
        line for line in lines if line["message"].startswith("run ") and "ended" in line["message"]
    ]
    assert ended and all(line["pipeline"] == "news" and line["run"] >= 1 for line in ended)
    drafted_lines = [line for line in lines if "drafted; its card is queued" in line["message"]]
    assert len(drafted_lines) == 3 and all(
        {"item", "attempt", "run"} <= d.keys() for d in drafted_lines
    )
    delivered = [line for line in lines if "delivered" in line["message"]]
    assert delivered and all(isinstance(line["outbox"], int) for line in delivered)
    assert os.environ.get("GATEHOUSE_LOG_FORMAT") is None  # the setting stayed in the bot
