"""The offline demo's page in headless Chromium: a card arrives, a click on Approve edits it.

Uses Debian's chromium (`apt-get install chromium`) through Playwright, never a browser
that Playwright downloads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright import async_api

from bot.demo import run as demo
from tests.e2e import test_demo
from tests.fakes import real

CHROMIUM = Path("/usr/bin/chromium")
# No GPU, no sandbox (containers), and nothing that would reach out to the network.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Milliseconds Playwright waits for the page: generous, only a hung demo takes this long.
PATIENCE_MS = 30_000

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def chromium() -> None:
    missing = "needs Debian's chromium at /usr/bin/chromium: apt-get install -y chromium"
    real.require(None if CHROMIUM.exists() else missing)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[demo.Running]:
    running, stop, task = await test_demo.start_demo(demo.Options(data_dir=tmp_path / "data"))
    try:
        yield running
    finally:
        stop.set()
        await task


@pytest.fixture
async def page() -> AsyncIterator[async_api.Page]:
    async with async_api.async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            context = await browser.new_context(viewport={"width": 900, "height": 900})
            page = await context.new_page()
            page.set_default_timeout(PATIENCE_MS)
            yield page
            await context.close()
        finally:
            await browser.close()


async def test_click_approve_and_the_card_changes(
    running: demo.Running, page: async_api.Page, tmp_path: Path
) -> None:
    outside: list[str] = []
    page.on(
        "request",
        lambda request: (
            outside.append(request.url) if not request.url.startswith(running.url) else None
        ),
    )
    await page.goto(running.url)
    card = page.locator(".msg.bot", has_text="Council approves bike lanes")
    await card.wait_for()
    # The card renders Telegram's formatting: the source is a link, the pipeline bold.
    link = card.locator("a", has_text="source")
    assert await link.get_attribute("href") == (
        "https://gazette.example.org/2024/05/13/main-street-bike-lanes"
    )
    assert await card.locator("b", has_text="news").count() == 1
    await page.screenshot(path=str(tmp_path / "card.png"))

    await card.get_by_role("button", name="Approve").click()

    await async_api.expect(card).to_contain_text("approved by Alex (@alex)")
    # The decision's buttons are gone; Undo stays until the dispatch goes.
    await async_api.expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    await async_api.expect(card.get_by_role("button", name="Undo")).to_be_visible()
    await async_api.expect(card.locator(".meta")).to_contain_text("edited")
    await async_api.expect(page.locator("#toast")).to_contain_text("approved")
    # Another card keeps its buttons: only the tapped one changed.
    other = page.locator(".msg.bot", has_text="Library extends weekend opening hours")
    await async_api.expect(other.get_by_role("button", name="Approve")).to_be_visible()
    assert outside == [], f"the page fetched from outside: {outside}"


async def test_typing_a_command_gets_an_answer(running: demo.Running, page: async_api.Page) -> None:
    await page.goto(running.url)
    await page.locator(".msg.bot").first.wait_for()
    await page.locator("#text").fill("/status")
    await page.locator("#text").press("Enter")
    await async_api.expect(page.locator(".msg.me .text").last).to_have_text("/status")
    reply = page.locator(".msg.bot", has_text="gatehouse ·")
    await async_api.expect(reply).to_contain_text("news")


async def test_edit_asks_for_a_reply_and_posts_the_new_draft(
    running: demo.Running, page: async_api.Page
) -> None:
    await page.goto(running.url)
    card = page.locator(".msg.bot", has_text="Library extends weekend opening hours")
    await card.get_by_role("button", name="Edit").click()
    # The bot asks for the text with ForceReply; the page answers it as a reply.
    await async_api.expect(page.locator("#replying")).to_be_visible()
    await page.locator("#text").fill("Weekend library hours: Sat 9-18, Sun 11-16.")
    await page.locator("#send").click()
    new_card = page.locator(".msg.bot", has_text="Weekend library hours: Sat 9-18")
    await async_api.expect(new_card.get_by_role("button", name="Approve")).to_be_visible()
    await async_api.expect(page.locator("#replying")).to_be_hidden()
