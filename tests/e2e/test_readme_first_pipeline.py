"""The README's first pipeline, step by step, as a newcomer runs it: its settings, prompt
and pipeline file taken from README.md itself, with the feed, the model, the webhook and
Telegram played by local servers. Each step's command is the README's; each must do
what the README says it does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.demo.botapi import localapi
from tests.e2e import test_bot_e2e as e2e
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM
from tests.fakes.webhook_server import WebhookServer

ROOT = Path(__file__).resolve().parents[2]
HOOK_TOKEN = "a-secret-the-webhook-expects"

pytestmark = pytest.mark.slow


def readme_block(name: str) -> str:
    """The fenced block the README marks `<!-- first-pipeline: name -->`."""
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- first-pipeline: {name} -->\n```[a-z]*\n(.*?)```", text, re.S)
    assert found, f"README.md has no first-pipeline {name} block"
    return found.group(1)


@pytest.fixture
def servers() -> Iterator[tuple[FeedServer, FakeLLM, WebhookServer]]:
    with FeedServer() as feed, FakeLLM() as model, WebhookServer() as hook:
        stories = [("c1", "Bridge reopens", "The Elm bridge reopens on Monday.")]
        feed.set("/city/feed.xml", feeds.rss(stories), "application/rss+xml")
        yield feed, model, hook


def setup_as_the_readme_says(
    tmp: Path, feed: FeedServer, model: FakeLLM, hook: WebhookServer, api: localapi.LocalBotApi
) -> dict[str, str]:
    """Steps 1, 3 and 4: the settings, the prompt and the pipeline file, pointed at the
    local servers; returns the environment the commands run in."""
    mine = tmp / "pipelines" / "mine"
    (mine / "prompts").mkdir(parents=True)
    (mine / "prompts" / "city.txt").write_text(readme_block("prompt"))
    pipeline = readme_block("pipeline")
    pipeline = pipeline.replace("https://example.org/city/feed.xml", feed.url("/city/feed.xml"))
    pipeline = pipeline.replace("https://hooks.example.org/city", hook.url + "/city")
    (mine / "city.yaml").write_text(pipeline)
    settings = dict(line.split("=", 1) for line in readme_block("env").strip().splitlines())
    settings |= {  # the README's placeholders, pointed at the local stand-ins
        "GATEHOUSE_LLM__API_KEY": "local-key",
        "GATEHOUSE_LLM__BASE_URL": model.base_url,
        "GATEHOUSE_TELEGRAM__TOKEN": e2e.TOKEN,
        "GATEHOUSE_TELEGRAM__BASE_URL": api.base_url,
        "GATEHOUSE_TELEGRAM__OPERATORS": str(e2e.OPERATOR),
        "GATEHOUSE_PIPELINES_DIR": "pipelines/mine",
    }
    (tmp / ".env").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    return {**clean, "NEWS_HOOK_TOKEN": HOOK_TOKEN, "PTB_TIMEDELTA": "1"}


def gatehouse(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args], cwd=tmp, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def test_the_readme_first_pipeline_works_as_written(
    tmp_path: Path, servers: tuple[FeedServer, FakeLLM, WebhookServer]
) -> None:
    feed, model, hook = servers
    with localapi.LocalBotApi(token=e2e.TOKEN) as api:
        env = setup_as_the_readme_says(tmp_path, feed, model, hook, api)
        # "Connect a real bot", step 4: with the directory made and no pipeline in it yet.
        pipeline = tmp_path / "pipelines" / "mine" / "city.yaml"
        written = pipeline.read_text()
        pipeline.unlink()
        done = gatehouse(tmp_path, env, "check")
        assert done.returncode == 0 and "no pipeline file" in done.stdout, done
        pipeline.write_text(written)
        # Step 2: the store and a budget.
        done = gatehouse(tmp_path, env, "init")
        assert done.returncode == 0 and (tmp_path / "data" / "gatehouse.db").exists(), done
        done = gatehouse(tmp_path, env, "set-budget", "global", "month", "20")
        assert done.returncode == 0 and "$20.00" in done.stdout, done
        assert gatehouse(tmp_path, env, "check").returncode == 0
        # Step 5: a dry run drafts with the real model through the ledger, sends nothing.
        done = gatehouse(tmp_path, env, "dry-run", "city", "--limit", "2", "--llm")
        assert done.returncode == 0, done.stdout + done.stderr
        # Money as a person reads it: "$0.013", or in cents under a cent ("0.0032¢").
        assert "Bridge reopens" in done.stdout
        assert re.search(r"cost (\$\d[\d,.]*|\d[\d.]*¢)\n", done.stdout), done.stdout
        assert len(model.requests) == 1 and hook.requests == [] and api.sent() == []

        # Step 6: run it; the story arrives as a card, Approve sends it to the webhook.
        with (tmp_path / "bot.log").open("wb") as log:
            bot = subprocess.Popen(
                [sys.executable, "-m", "bot.cli", "run"], cwd=tmp_path, env=env,
                stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        try:
            card = api.wait_for(lambda: e2e.cards(api)[:1], timeout=60)[0]
            assert "📝 city · item" in card.text and "drafter llm" in card.text
            answer = e2e.tap(api, e2e.OPERATOR, card, "Approve")
            assert answer["text"] == "✅ approved"
            api.wait_for(lambda: hook.requests, timeout=30)
            sent = hook.requests[0]
            assert sent.path == "/hook/city" and sent.headers["authorization"] == HOOK_TOKEN
            assert sent.headers["idempotency-key"]
            assert json.loads(sent.body)["title"] == "Bridge reopens"
            api.wait_for(lambda: "📤 sent" in e2e.version_of(api, card.message_id, 3).text, 30)
        finally:
            bot.terminate()
            bot.wait(timeout=30)
