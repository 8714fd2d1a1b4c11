"""`gatehouse demo --pipelines DIR` in headless Chromium: a directory holding the README's
first pipeline (its feed and its webhook played by local servers) shows its cards on the
page, approving one sends it to the webhook, and the directory is byte-identical after
the demo stops. Uses Debian's chromium through Playwright, as test_demo_browser does."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright import async_api

from bot.demo import run as demo
from bot.demo import yours
from tests.e2e import test_demo
from tests.e2e import test_demo_browser as browser
from tests.e2e import test_readme_first_pipeline as readme
from tests.fakes import feeds, real
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM
from tests.fakes.webhook_server import WebhookServer

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def chromium() -> None:
    missing = "needs Debian's chromium at /usr/bin/chromium: apt-get install -y chromium"
    real.require(None if browser.CHROMIUM.exists() else missing)


@pytest.fixture
def servers() -> Iterator[tuple[FeedServer, WebhookServer]]:
    with FeedServer() as feed, WebhookServer() as hook:
        stories = [("c1", "Bridge reopens", "The Elm bridge reopens on Monday.")]
        feed.set("/city/feed.xml", feeds.rss(stories), "application/rss+xml")
        yield feed, hook


def readme_env(where: Path, model: FakeLLM) -> None:
    """The README's step 1 settings in `where`/.env, the model played by a local server."""
    settings = dict(line.split("=", 1) for line in readme.readme_block("env").strip().splitlines())
    settings |= {"GATEHOUSE_LLM__API_KEY": "local-key", "GATEHOUSE_LLM__BASE_URL": model.base_url}
    (where / ".env").write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


def readme_pipelines(where: Path, feed: FeedServer, hook: WebhookServer) -> Path:
    """The README's steps 3 and 4, literally, pointed at the local feed and webhook."""
    mine = where / "pipelines" / "mine"
    (mine / "prompts").mkdir(parents=True)
    (mine / "prompts" / "city.txt").write_text(readme.readme_block("prompt"))
    pipeline = readme.readme_block("pipeline")
    pipeline = pipeline.replace("https://example.org/city/feed.xml", feed.url("/city/feed.xml"))
    pipeline = pipeline.replace("https://hooks.example.org/city", hook.url + "/city")
    (mine / "city.yaml").write_text(pipeline)
    return mine


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file and directory under `directory`, with each file's bytes."""
    return {
        str(path.relative_to(directory)): path.read_bytes() if path.is_file() else b"<dir>"
        for path in sorted(directory.rglob("*"))
    }


@pytest.fixture
async def page() -> AsyncIterator[async_api.Page]:
    async with async_api.async_playwright() as playwright:
        chrome = await playwright.chromium.launch(
            executable_path=str(browser.CHROMIUM), args=browser.CHROMIUM_ARGS, headless=True
        )
        try:
            context = await chrome.new_context(viewport={"width": 900, "height": 900})
            page = await context.new_page()
            page.set_default_timeout(browser.PATIENCE_MS)
            yield page
            await context.close()
        finally:
            await chrome.close()


async def test_the_demo_runs_your_pipelines_and_leaves_their_directory_as_it_was(
    tmp_path: Path,
    servers: tuple[FeedServer, WebhookServer],
    page: async_api.Page,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feed, hook = servers
    monkeypatch.setenv("NEWS_HOOK_TOKEN", readme.HOOK_TOKEN)
    for name in [name for name in os.environ if name.startswith("GATEHOUSE_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    mine = readme_pipelines(tmp_path, feed, hook)
    before = snapshot(mine)
    with FakeLLM() as model:
        readme_env(tmp_path, model)  # step 1: your model and its price, in ./.env
        llm, prices = yours.llm_settings(None)
        options = demo.Options(tmp_path / "data", 0, mine, llm, prices)
        await _run_yours(options, page, hook, tmp_path)
        assert model.requests  # your model drafted it, not the demo's
    assert snapshot(mine) == before
    assert not (tmp_path / "data" / "pipelines").exists()  # nor the demo's own files


async def _run_yours(
    options: demo.Options, page: async_api.Page, hook: WebhookServer, tmp_path: Path
) -> None:
    running, stop, task = await test_demo.start_demo(options)
    try:
        assert running.yours and running.pipelines_dir == options.pipelines_dir
        await page.goto(running.url)
        # The demo's own pipelines are not run: only yours.
        card = page.locator(".msg.bot", has_text="📝 city · item")
        await async_api.expect(card).to_contain_text("Bridge reopens")
        await async_api.expect(card).to_contain_text("drafter llm")
        await card.get_by_role("button", name="Approve").click()
        await async_api.expect(card).to_contain_text("📤 sent", timeout=browser.PATIENCE_MS)
        sent = hook.requests[0]
        assert sent.path == "/hook/city" and sent.headers["authorization"] == readme.HOOK_TOKEN
        assert json.loads(sent.body)["title"] == "Bridge reopens"
        assert await page.locator(".msg.bot", has_text="📝 news · item").count() == 0
        # The banner's CLI commands work against it, with your pipeline's dry run.
        commands = demo.banner_commands(running)
        assert "dry-run city" in commands
        for command in commands:
            shell = await asyncio.create_subprocess_shell(
                demo.cli_command(running, command), cwd=tmp_path,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out, _ = await shell.communicate()
            assert shell.returncode == 0, (command, out)
    finally:
        stop.set()
        await task


def test_a_pipelines_directory_the_demo_cannot_run_is_named_with_the_reason(
    tmp_path: Path,
) -> None:
    with pytest.raises(yours.PipelinesError, match="no such directory"):
        yours.check(tmp_path / "nowhere")
    with pytest.raises(yours.PipelinesError, match="no pipeline file"):
        yours.check(tmp_path)
    (tmp_path / "bad.yaml").write_text("name: bad\nschedule: sometimes\n")
    with pytest.raises(yours.PipelinesError, match=r"bad\.yaml"):
        yours.check(tmp_path)


async def test_the_command_line_takes_pipelines(tmp_path: Path) -> None:
    """`gatehouse demo --pipelines DIR` reaches the demo: a missing one exits 2, said why."""
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "demo", "--pipelines", str(tmp_path / "nowhere"),
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await cli.communicate()
    assert cli.returncode == 2, err
    assert b"--pipelines" in err and b"no such directory" in err


def test_your_llm_settings_and_prices_are_read_as_gatehouse_run_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [name for name in os.environ if name.startswith("GATEHOUSE_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert yours.llm_settings(None) == (None, {})  # no .env: the demo's local model
    with FakeLLM() as model:
        readme_env(tmp_path, model)
        llm, prices = yours.llm_settings(None)
    assert llm is not None and llm.model == "gpt-4o-mini" and llm.base_url == model.base_url
    assert prices["gpt-4o-mini"].input_micros_per_mtok == 150_000
