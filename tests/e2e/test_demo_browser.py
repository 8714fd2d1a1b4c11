"""The offline demo's page in headless Chromium: a card arrives, a click on Approve edits it.

Uses Debian's chromium (`apt-get install chromium`) through Playwright, never a browser
that Playwright downloads.
"""

from __future__ import annotations

import re
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
# Assertions wait as long as actions do (Playwright's own default for them is 5 s).
async_api.expect.set_options(timeout=PATIENCE_MS)

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def chromium() -> None:
    missing = "needs Debian's chromium at /usr/bin/chromium: apt-get install -y chromium"
    real.require(None if CHROMIUM.exists() else missing)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[demo.Running]:
    running, stop, task = await test_demo.start_demo(
        demo.Options(data_dir=tmp_path / "data", port=0)
    )
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
    # The demo's own news site, served by the page server.
    assert await link.get_attribute("href") == (
        running.url.rstrip("/") + "/gazette/2024/05/13/main-street-bike-lanes"
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
    # The bot asks for the text with ForceReply; the page answers it as a reply, and its
    # banner says what the reply will do.
    await async_api.expect(page.locator("#replying")).to_be_visible()
    await async_api.expect(page.locator("#replying")).to_contain_text(
        "your text becomes the new draft"
    )
    await page.locator("#text").fill("Weekend library hours: Sat 9-18, Sun 11-16.")
    await page.locator("#send").click()
    new_card = page.locator(".msg.bot", has_text="Weekend library hours: Sat 9-18")
    await async_api.expect(new_card.get_by_role("button", name="Approve")).to_be_visible()
    await async_api.expect(page.locator("#replying")).to_be_hidden()


# -- the whole product in the first minute --------------------------------------------------

#: How long the SLA warning may take to show: the urgent window (90 s) less its 40 s
#: warning lead, plus a sweep's pass and the card's own delivery; generous, as every wait.
WARNING_PATIENCE_MS = 90_000


def by_id(page: async_api.Page, message_id: str | None) -> async_api.Locator:
    """One message, followed through its edits (each edit redraws it under the same id)."""
    assert message_id is not None
    return page.locator(f'.msg[data-message-id="{message_id}"]')


@pytest.mark.timeout(150)
async def test_the_first_minute_shows_costs_the_budget_an_alert_an_sla_warning_and_a_post(
    tmp_path: Path, page: async_api.Page
) -> None:
    options = demo.Options(data_dir=tmp_path / "data", port=0)
    running, stop, task = await test_demo.start_demo(options)
    try:
        await page.goto(running.url)
        # Every news card was drafted by the demo's priced LLM and shows what it cost.
        costly = page.locator(".msg.bot", has_text=re.compile(r"drafter llm · cost \$0\.0\d*[1-9]"))
        await async_api.expect(costly).to_have_count(5)
        # Their spend passed half of the day's budget: the threshold alert.
        alert = page.locator(".msg.bot", has_text="50% reached")
        await async_api.expect(alert).to_contain_text("Budget global/day")

        card = by_id(page, await costly.first.get_attribute("data-message-id"))
        await card.get_by_role("button", name="Approve").click()
        await async_api.expect(card).to_contain_text("approved by Alex (@alex)")
        await async_api.expect(card).to_contain_text("📤 sent")
        await async_api.expect(card).to_contain_text(f"wrote {running.out_dir / 'news'}/news-")

        await page.locator("#text").fill("/budget")
        await page.locator("#text").press("Enter")
        budget = page.locator(".msg.bot", has_text="budgets")
        await async_api.expect(budget).to_contain_text(re.compile(r"global ▓▓▓[▓░]{2} \d+% of"))
        await async_api.expect(budget).to_contain_text(re.compile(r"\$0\.\d+ spent"))

        # The urgent pipeline's 90-second window: warned 40 s ahead, inside the minute.
        warning = page.locator(".msg.bot", has_text="⏳ item")
        await async_api.expect(warning).to_contain_text("(urgent)", timeout=WARNING_PATIENCE_MS)
        await page.screenshot(path=str(tmp_path / "first-minute.png"), full_page=True)
    finally:
        stop.set()
        await task


async def test_reloading_never_restores_a_stale_reply_mode(
    running: demo.Running, page: async_api.Page
) -> None:
    await page.goto(running.url)
    card = page.locator(".msg.bot", has_text="Library extends weekend opening hours")
    await card.get_by_role("button", name="Edit").click()
    await async_api.expect(page.locator("#replying")).to_be_visible()
    await page.locator("#text").fill("Weekend library hours: Sat 9-18, Sun 11-16.")
    await page.locator("#send").click()
    await page.locator(".msg.bot", has_text="Weekend library hours: Sat 9-18").wait_for()
    # An answered prompt, then one left unanswered: neither comes back after a reload.
    other = page.locator(".msg.bot", has_text="Council approves bike lanes")
    await other.get_by_role("button", name="Edit").click()
    await async_api.expect(page.locator("#replying")).to_be_visible()
    await page.reload()
    # The prompts are drawn in the same pass that decides the reply mode.
    prompts = page.locator(".msg.bot", has_text="send it as a reply to this message")
    await async_api.expect(prompts).to_have_count(2)
    await async_api.expect(page.locator("#replying")).to_be_hidden()
    await page.locator("#text").fill("/pending")
    await page.locator("#text").press("Enter")
    await async_api.expect(page.locator(".msg.me .text").last).to_have_text("/pending")


@pytest.mark.timeout(120)
async def test_a_restart_with_its_data_dir_resends_the_open_cards(
    tmp_path: Path, page: async_api.Page
) -> None:
    options = demo.Options(data_dir=tmp_path / "data", port=0)
    running, stop, task = await test_demo.start_demo(options)
    try:
        await page.goto(running.url)
        news = page.locator(".msg.bot", has_text="📝 news · item")
        await async_api.expect(news).to_have_count(5)
    finally:
        stop.set()
        await task

    running, stop, task = await test_demo.start_demo(options)
    try:
        await page.goto(running.url)
        # The conversation so far, without its buttons, then each open card sent again.
        await async_api.expect(news).to_have_count(10)
        for n in range(5):
            await async_api.expect(news.nth(n).locator(".keyboard")).to_have_count(0)
            await async_api.expect(
                news.nth(5 + n).get_by_role("button", name="Approve")
            ).to_be_visible()
        resent = news.nth(5)
        await resent.get_by_role("button", name="Approve").click()
        await async_api.expect(resent).to_contain_text("📤 sent")
    finally:
        stop.set()
        await task


async def test_a_typed_reject_reason_says_it_is_a_reason_not_a_draft(
    running: demo.Running, page: async_api.Page
) -> None:
    await page.goto(running.url)
    card = page.locator(".msg.bot", has_text="Library extends weekend opening hours")
    await card.get_by_role("button", name="Reject").click()
    await card.get_by_role("button", name="other").click()
    await async_api.expect(page.locator("#replying")).to_contain_text(
        "your text is the reason for the reject"
    )
    await async_api.expect(page.locator("#replying")).not_to_contain_text("new draft")
    await page.locator("#text").fill("The hours changed again")
    await page.locator("#send").click()
    await async_api.expect(card).to_contain_text("rejected by Alex (@alex)")
    await async_api.expect(card).to_contain_text("The hours changed again")
