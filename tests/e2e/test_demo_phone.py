"""The demo on a phone-sized screen (390 by 844) in headless Chromium: /status, /pending,
/budget, /history, /help, a card after dispatch and a card with its tells line are
screenshotted, and no line of any reply runs past its bubble (nor a bubble or a button
past the screen).

Uses Debian's chromium through Playwright, as tests/e2e/test_demo_browser.py does.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright import async_api

from bot.demo import run as demo
from bot.web import charts
from tests.e2e import test_demo
from tests.e2e import test_demo_browser as browser
from tests.fakes import real

PHONE: async_api.ViewportSize = {"width": 390, "height": 844}
#: Every bubble, its text, and each keyboard row: what is wider than its box, by how much.
OVERFLOWS = """() => {
  const found = [];
  const edge = document.documentElement.clientWidth;
  for (const msg of document.querySelectorAll('.msg.bot')) {
    const text = msg.querySelector('.text');
    const label = (text ? text.innerText : '').slice(0, 40);
    for (const box of msg.querySelectorAll('.text, .text pre, .keyboard .row')) {
      const over = box.scrollWidth - box.clientWidth;
      if (over > 1) found.push(`${label}: ${box.className} by ${over}px`);
    }
    for (const part of msg.querySelectorAll('.bubble, .keyboard button')) {
      const right = part.getBoundingClientRect().right;
      if (right > edge + 1) found.push(`${label}: ${part.tagName} ends at ${right}px of ${edge}`);
    }
  }
  return found;
}"""

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def chromium() -> None:
    missing = "needs Debian's chromium at /usr/bin/chromium: apt-get install -y chromium"
    real.require(None if browser.CHROMIUM.exists() else missing)


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[demo.Running]:
    options = demo.Options(data_dir=tmp_path / "data", port=0)
    found, stop, task = await test_demo.start_demo(options)
    try:
        yield found
    finally:
        stop.set()
        await task


@pytest.fixture
async def phone() -> AsyncIterator[async_api.Page]:
    async with async_api.async_playwright() as playwright:
        chrome = await playwright.chromium.launch(
            executable_path=str(browser.CHROMIUM), args=browser.CHROMIUM_ARGS, headless=True
        )
        try:
            context = await chrome.new_context(
                viewport=PHONE, device_scale_factor=2, is_mobile=True
            )
            page = await context.new_page()
            page.set_default_timeout(browser.PATIENCE_MS)
            yield page
            await context.close()
        finally:
            await chrome.close()


async def ask(page: async_api.Page, command: str, answer: str) -> async_api.Locator:
    await page.locator("#text").fill(command)
    await page.locator("#text").press("Enter")
    reply = page.locator(".msg.bot", has_text=answer).last
    await reply.wait_for()
    return reply


async def test_every_reply_fits_a_phone_screen(
    running: demo.Running, phone: async_api.Page, tmp_path: Path
) -> None:
    # A day's budget, set from the terminal as an operator would, so /budget draws bars.
    cli = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "--env-file", str(running.env_file),
        "set-budget", "global", "day", "5",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert await cli.wait() == 0  # through the demo's control socket, in this event loop
    page = phone
    await page.goto(running.url)
    card = page.locator(".msg.bot", has_text="Council approves bike lanes")
    await card.get_by_role("button", name="Approve").click()
    # Sent once the undo window has passed (the demo keeps the default 10 s).
    await async_api.expect(card).to_contain_text("📤 sent: wrote", timeout=browser.PATIENCE_MS)
    await async_api.expect(card).to_contain_text("approved by Alex (@alex)")
    shots = {"card": card}
    shots["status"] = await ask(page, "/status", "gatehouse ·")
    await async_api.expect(shots["status"]).not_to_contain_text("WAL")
    shots["pending"] = await ask(page, "/pending", "waiting for approval")
    await async_api.expect(shots["pending"].get_by_role("button").first).to_contain_text("item")
    shots["budget"] = await ask(page, "/budget", "of $5.00 today")
    await async_api.expect(shots["budget"]).to_contain_text("░")
    # The approved card's item (the demo's pipelines draft side by side, in any order).
    found = re.search(r"news · item (\d+)", await card.inner_text())
    assert found is not None
    item = found.group(1)
    shots["history"] = await ask(page, f"/history {item}", f"item {item} (news)")
    shots["help"] = await ask(page, "/help", "/replay")
    # The market story's draft says "bustling": its card has the tells line under the text.
    shots["tells"] = page.locator(".msg.bot", has_text="Farmers' market moves").first
    await async_api.expect(shots["tells"]).to_contain_text(re.compile(r"✍️ \d tells?: .*bustling"))
    for name, reply in shots.items():
        await reply.scroll_into_view_if_needed()
        await reply.screenshot(path=str(tmp_path / f"{name}.png"))
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    await page.screenshot(path=str(tmp_path / "screen.png"))
    assert await page.evaluate(OVERFLOWS) == []


@pytest.mark.timeout(200)
async def test_on_a_phone_a_deadline_can_be_acted_on_and_an_expired_card_replayed(
    running: demo.Running, phone: async_api.Page, tmp_path: Path
) -> None:
    page = phone
    await page.goto(running.url)
    # The first screen: cards one can act on, and the signed audit head as one short line.
    await page.locator(".msg.bot .keyboard button", has_text="Approve").first.wait_for()
    await page.screenshot(path=str(tmp_path / "first-screen.png"))
    head = page.locator(".msg.bot", has_text="audit head")
    for n in range(await head.count()):
        box = await head.nth(n).bounding_box()
        assert box is not None and box["height"] < PHONE["height"] / 6, "the audit head is a wall"
    assert await page.evaluate(OVERFLOWS) == []

    # The urgent pipeline's warning: a reply to its card, in words, with the buttons that
    # act on it, brought onto the screen (under six cards) with 30 s and more to act.
    warning = page.locator(".msg.bot", has_text="(urgent) is waiting for approval")
    await warning.wait_for(timeout=browser.WARNING_PATIENCE_MS)
    await async_api.expect(warning).to_be_in_viewport()
    await async_api.expect(warning).to_have_class(re.compile(r"\bwarning\b"))
    left = re.search(r"(\d+) s left", await warning.inner_text())
    assert left is not None and int(left.group(1)) >= 30, await warning.inner_text()
    await async_api.expect(warning.locator(".quote")).to_contain_text("urgent")
    for label in ("Approve", "Reject", "Extend"):
        await async_api.expect(warning.get_by_role("button", name=label)).to_be_visible()
    await page.screenshot(path=str(tmp_path / "sla-warning.png"))

    # Unanswered, the card expires: it says so and when, and offers Replay.
    card = browser.by_id(page, await warning.get_attribute("data-reply-to"))
    # 40 s after the warning: longer than the usual patience.
    await async_api.expect(card).to_contain_text(
        "⌛ expired at", timeout=browser.WARNING_PATIENCE_MS
    )
    await async_api.expect(card).to_contain_text("nobody decided within the approval window")
    replay = card.get_by_role("button", name="Replay")
    await async_api.expect(replay).to_be_visible()
    await card.scroll_into_view_if_needed()
    await page.screenshot(path=str(tmp_path / "expired-card.png"))
    assert await page.evaluate(OVERFLOWS) == []
    await replay.click()
    await async_api.expect(page.locator("#toast")).to_contain_text("replayed: attempt 2")
    for name in ("first-screen", "sla-warning", "expired-card"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000


async def test_on_a_phone_tapping_the_draft_in_an_edit_prompt_fills_the_input(
    running: demo.Running, phone: async_api.Page
) -> None:
    page = phone
    await page.goto(running.url)
    card = page.locator(".msg.bot", has_text="Council approves bike lanes")
    await card.get_by_role("button", name="Edit").click()
    prompt = page.locator(".msg.bot", has_text="tap the draft to copy it").last
    draft = prompt.locator(".text pre, .text code").first
    await draft.click()  # a tap on a phone; the context has no touch events
    await async_api.expect(page.locator("#text")).to_have_value(await draft.inner_text())
    assert (await draft.inner_text()).strip()
    await async_api.expect(page.locator("#toast")).to_contain_text("Copied")


async def test_the_team_room_on_a_phone_shows_both_votes_on_one_card(
    running: demo.Running, phone: async_api.Page, tmp_path: Path
) -> None:
    page = phone
    await page.goto(running.url)
    await page.get_by_role("button", name="Team room").click()
    card = page.locator(".msg.bot", has_text="📝 team · item")
    await card.get_by_role("button", name="Approve").click()
    await async_api.expect(card).to_contain_text(
        "✅ Alex (@alex) · waiting for 1 more of Sam (@sam), Kim (@kim)"
    )
    await async_api.expect(card.get_by_role("button", name="Approve")).to_be_visible()

    # Sam, in the same room, sees Alex's vote on the same card and completes the quorum.
    await page.get_by_role("button", name="Sam (@sam)").click()  # named as on the cards
    await async_api.expect(page.locator("#operator")).to_have_text("Sam (@sam)")
    theirs = page.locator(".msg.bot", has_text="📝 team · item")
    await async_api.expect(theirs).to_contain_text(
        "✅ Alex (@alex) · waiting for 1 more of Sam (@sam), Kim (@kim)"
    )
    await theirs.get_by_role("button", name="Approve").click()
    await async_api.expect(theirs).to_contain_text("approved by Alex (@alex), Sam (@sam)")
    await async_api.expect(theirs).to_contain_text("📤 sent")
    await theirs.scroll_into_view_if_needed()
    await page.screenshot(path=str(tmp_path / "team-room.png"))
    assert (tmp_path / "team-room.png").stat().st_size > 1000
    assert await page.evaluate(OVERFLOWS) == []
    # The address keeps who the page speaks as, and where.
    await page.reload()
    await async_api.expect(page.locator("#operator")).to_have_text("Sam (@sam)")
    await async_api.expect(page.locator(".msg.bot", has_text="📝 team · item")).to_contain_text(
        "approved by Alex (@alex), Sam (@sam)"
    )
    # Their private chats hold no team card: the room has the one card.
    await page.get_by_role("button", name="Team room").click()
    await async_api.expect(
        page.locator(".msg.bot", has_text="📝 news · item").first
    ).to_be_visible()
    assert await page.locator(".msg.bot", has_text="📝 team · item").count() == 0


#: Everything on the page one taps that is shorter than a thumb (phone guidelines ask for
#: 44 to 48 px): buttons, the message box, a reply's quote (a tap scrolls to its message).
SMALL_TARGETS = """(least) => {
  const found = [];
  for (const el of document.querySelectorAll('button, textarea, input, .quote')) {
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.height === 0) continue;  // hidden
    const label = `${el.tagName} "${el.textContent.slice(0, 30)}"`;
    if (box.height < least) found.push(`${label}: ${box.height}px`);
  }
  return found;
}"""
#: Whether an element's box lies wholly inside the chat's visible part (its scroller).
IN_VIEW = """(el) => {
  const box = el.getBoundingClientRect();
  const view = document.getElementById('chat').getBoundingClientRect();
  return el.complete && el.naturalWidth > 0 && box.height > 0
    && box.top >= view.top - 1 && box.bottom <= view.bottom + 1;
}"""
#: The text of the message drawn highest on the page.
FIRST_LINE = """() => [...document.querySelectorAll('#chat .msg')]
  .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)[0].innerText"""
DRAFT_300 = (
    "Weekend library hours change from 1 June: Saturdays 9:00 to 18:00, Sundays 11:00 to "
    "16:00, after a survey in which 68% of members asked for longer hours. Tuesday "
    "evenings close an hour earlier to pay for it, so no new staff are needed; the "
    "council thanks everyone who answered the survey this spring. "
)[:300]


async def test_on_a_phone_the_page_fits_a_thumb(
    running: demo.Running, phone: async_api.Page, tmp_path: Path
) -> None:
    page = phone
    await page.goto(running.url)
    card = page.locator(".msg.bot", has_text="Council approves bike lanes")
    await card.get_by_role("button", name="Approve").wait_for()
    # The header names the operator as the cards do; the first line is not the audit head.
    await async_api.expect(page.locator(".top .note")).to_have_text(
        "offline demo · you are Alex (@alex)"
    )
    await page.locator(".msg", has_text="audit head").wait_for()
    first = await page.evaluate(FIRST_LINE)
    assert "audit head" not in first, first
    await page.screenshot(path=str(tmp_path / "thumb-first-screen.png"))
    assert await page.evaluate(SMALL_TARGETS, 44) == []

    # Edit: a 300-character draft wraps in a box grown to show it, not scrolled sideways.
    await card.get_by_role("button", name="Edit").click()
    await page.locator(".msg.bot", has_text="tap the draft to copy it").last.wait_for()
    box = page.locator("#text")
    await box.fill(DRAFT_300)
    sizes = await box.evaluate(
        "el => [el.tagName, el.scrollWidth, el.clientWidth, el.scrollHeight, el.clientHeight]"
    )
    tag, wide, shown_wide, tall, shown_tall = sizes
    assert tag == "TEXTAREA" and wide <= shown_wide, sizes
    assert tall <= shown_tall + 1 and shown_tall > 3 * 44, sizes  # grown to several lines
    await page.screenshot(path=str(tmp_path / "thumb-edit.png"))
    assert await page.evaluate(SMALL_TARGETS, 44) == []  # the reply banner's ✕ too
    await page.locator("#cancel-reply").click()
    await box.fill("")

    # A chart asked for lands wholly in view once its picture has loaded.
    await ask(page, "/stats chart", "the editor's numbers")
    chart = page.locator(".msg.chart img.photo").last
    await page.wait_for_function(IN_VIEW, arg=await chart.element_handle())
    await page.screenshot(path=str(tmp_path / "thumb-stats-chart.png"))
    # The budget chart's type, as shown, is 12 px and more.
    await ask(page, "/budget chart", "AI spend per scope")
    chart = page.locator(".msg.chart img.photo").last
    await page.wait_for_function(IN_VIEW, arg=await chart.element_handle())
    shown = await chart.evaluate("el => el.getBoundingClientRect().width")
    assert shown >= charts.SHOWN_PX and shown * charts.FONT_PX / charts.WIDTH >= 12, shown
    await page.screenshot(path=str(tmp_path / "thumb-budget-chart.png"))
    assert await page.evaluate(SMALL_TARGETS, 44) == []
    assert await page.evaluate(OVERFLOWS) == []
