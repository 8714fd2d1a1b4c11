"""Each model's pace as the operator reads it: /status, `gatehouse status` (through the
control socket's ping), and /metrics; a real client against the fake LLM."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import exposition
from pydantic import SecretStr

from bot.chat import render
from bot.cli import output as cli_output
from bot.cli import reads
from bot.process import control
from bot.web import metrics
from pipelines import operations
from pipelines.providers import client as providers
from pipelines.providers import pace
from store.reports import info
from tests import running
from tests.fakes.llm_server import FakeLLM

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
BUSY = pace.Snapshot("gpt-4o-mini", 38, 40, 40, 64, 2, 5)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A data directory short enough for a socket path."""
    with tempfile.TemporaryDirectory(prefix="gh-", dir="/tmp") as name:
        data_dir = Path(name) / "data"
        data_dir.mkdir(mode=0o700)
        yield data_dir


def test_status_shows_each_models_calls_limit_and_429s_on_one_short_line() -> None:
    calm = pace.Snapshot("claude-haiku", 0, 16, None, 16, 0, 0)
    overview = operations.Overview(NOW, [], wal_bytes=0, models=[BUSY, calm])
    lines = render.status_overview(overview).split("\n")
    assert "gpt-4o-mini: 38 in flight / 40 (stated 40) · ⚠️ 429s 1h: 2" in lines
    assert "claude-haiku: 0 in flight / 16 · 429s 1h: 0" in lines
    assert all(len(line) <= 60 for line in lines if "flight" in line)  # a phone's width
    summary = info.Info("data/gatehouse.db", 9, 0, 0, 0, {})
    text = cli_output.status(overview, summary, 4242, NOW)
    assert "model   gpt-4o-mini: 38 in flight / 40 (stated 40) · ⚠️ 429s 1h: 2" in text


def test_metrics_show_each_models_pace() -> None:
    text = exposition.generate_latest(
        metrics._Scrape(list(metrics.model_families([BUSY])))
    ).decode()
    for line in (
        'gatehouse_llm_calls_in_flight{model="gpt-4o-mini"} 38.0',
        'gatehouse_llm_call_limit{model="gpt-4o-mini"} 40.0',
        'gatehouse_llm_stated_limit{model="gpt-4o-mini"} 40.0',
        'gatehouse_llm_rate_limited_last_hour{model="gpt-4o-mini"} 2.0',
        'gatehouse_llm_rate_limited_total{model="gpt-4o-mini"} 5.0',
    ):
        assert line in text


async def test_the_ping_carries_the_pace_the_cli_reads(short_dir: Path, tmp_path: Path) -> None:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    with FakeLLM() as llm:
        llm.stated_limit = 7
        settings = providers.ProviderSettings(
            kind="openai", base_url=llm.base_url, api_key=SecretStr("k"), model="pinged-model"
        )
        async with (
            providers.ProviderClient(settings) as provider,
            running.with_control(short_dir, pipelines),
        ):
            async with provider.turn(100):
                await provider.complete("sys", "prompt", max_tokens=100)
            answer = await asyncio.to_thread(control.request, short_dir, "ping", {}, 10)
    found = [m for m in reads._models(answer["models"]) if m.model == "pinged-model"]
    assert found == [pace.Snapshot("pinged-model", 0, 7, 7, 16, 0, 0)]
    assert reads._models([{"model": "x", "from": "another version"}]) == []
