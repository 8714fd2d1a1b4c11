"""The demo's news site: cards drafted from its local article pages show each page's
picture above their text, in the chat's data and on a 390 by 844 screen (screenshot)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright import async_api

from bot.demo import run as demo
from bot.demo import site
from tests.e2e import test_demo
from tests.e2e import test_demo_browser as browser
from tests.e2e import test_demo_phone as phone_tests
from tests.e2e.test_demo import Page, cards, running  # noqa: F401 (a fixture)
from tests.fakes import real

phone = phone_tests.phone


@pytest.fixture
def chromium() -> None:
    real.require(None if browser.CHROMIUM.exists() else "needs Debian's chromium")


@pytest.fixture
async def page(running: demo.Running) -> AsyncIterator[Page]:  # noqa: F811
    async with httpx.AsyncClient(base_url=running.url, timeout=test_demo.PATIENCE) as client:
        yield Page(client)


def all_news(state: dict[str, Any]) -> list[dict[str, Any]]:
    found = cards(state)
    return found if len(found) == len(site.ARTICLES) else []


async def test_each_news_card_is_drafted_from_its_article_and_shows_its_picture(
    page: Page,
    running: demo.Running,  # noqa: F811
) -> None:
    every = await page.until(all_news)
    base = running.url.rstrip("/") + site.PREFIX
    for card in every:
        preview = card["link_preview_options"]
        assert preview["show_above_text"] and preview["prefer_large_media"], card["text"]
        assert preview["url"].startswith(base) and preview["url"].endswith(".png")
        assert "full text not used" not in card["text"]
        picture = await page.client.get(preview["url"])
        assert picture.status_code == 200 and picture.content.startswith(b"\x89PNG")
    bikes = next(c for c in every if "bike lanes" in c["text"])
    # The demo's model writes from the article: a fact only the page has reaches the draft.
    assert "the first such lanes in Riverside" in bikes["text"]


@pytest.mark.slow
async def test_a_phone_shows_the_picture_above_the_cards_text(
    chromium: None,
    running: demo.Running,  # noqa: F811
    phone: async_api.Page,
    tmp_path: Path,
) -> None:
    await phone.goto(running.url)
    card = phone.locator(".msg.bot", has_text="Council approves bike lanes")
    picture = card.locator("img.preview")
    await async_api.expect(picture).to_be_visible(timeout=browser.PATIENCE_MS)
    assert await picture.evaluate("p => p.complete && p.naturalWidth") == site.WIDTH
    above, text = await picture.bounding_box(), await card.locator(".text").bounding_box()
    assert above is not None and text is not None and above["y"] + above["height"] <= text["y"]
    assert above["width"] <= phone_tests.PHONE["width"]
    await card.scroll_into_view_if_needed()
    await card.screenshot(path=str(tmp_path / "card-with-picture.png"))
    assert (tmp_path / "card-with-picture.png").stat().st_size > 1000
    assert await phone.evaluate(phone_tests.OVERFLOWS) == []
