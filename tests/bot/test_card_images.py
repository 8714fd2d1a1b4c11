"""A card's image: its link preview above the text, kept through every edit, checked by
the local Bot API server as Telegram checks link_preview_options."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import httpx
import pytest
from telegram import Bot

from bot.demo.botapi import localapi
from store import db, items, outbox
from tests.bot.test_bot_sender import CHATS, make_sender

TOKEN = "555222:card-images-token_abcdefghijklmnopqrst"
IMAGE = "https://img.example.org/story.jpg"
SHOWN = {"url": IMAGE, "show_above_text": True, "prefer_large_media": True}


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


async def image_card(store: db.Store, now: datetime, text: str, source_id: str = "g1") -> int:
    item = await store.write(items.create_sync, "news", "s", source_id, {"title": "T"}, now)
    assert item is not None
    payload = {"pipeline": "news", "title": "T", "text": text, "image_url": IMAGE}
    row_id = await outbox.enqueue(
        store, "card", outbox.OPERATORS, {**payload, "attempt": 1, "version": 1}, now,
        item_id=item.id,
    )  # fmt: skip
    assert row_id is not None
    return item.id


async def approve(store: db.Store, item_id: int, now: datetime) -> None:
    edit = {"attempt": 1, "version": 1, "state": "approved", "status": "✅ approved by 11"}
    await outbox.enqueue(store, "card_edit", outbox.OPERATORS, edit, now, item_id=item_id)


async def test_the_image_is_the_cards_preview_above_its_text_and_stays_after_an_edit(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    item_id = await image_card(store, now, "a short draft")
    the_sender = make_sender(store, bot, now)
    assert await the_sender.send_due(now) == 1
    for chat in CHATS:
        [card] = api.sent(chat)
        assert card.link_preview_options == SHOWN and "a short draft" in card.text
    await approve(store, item_id, now)
    assert await the_sender.flush_item(item_id, now) == 1
    for chat in CHATS:
        [card] = api.sent(chat)
        assert "approved by 11" in card.text and card.version == 2
        assert card.link_preview_options == SHOWN


async def test_a_long_card_shows_the_image_on_its_first_part_only(
    store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime
) -> None:
    item_id = await image_card(store, now, "line\n" * 1000)  # two messages per chat
    the_sender = make_sender(store, bot, now)
    await the_sender.send_due(now)
    first, last = api.sent(CHATS[0])
    assert first.link_preview_options == SHOWN
    assert last.link_preview_options == {"is_disabled": True}
    await approve(store, item_id, now)
    await the_sender.flush_item(item_id, now)
    first, last = api.sent(CHATS[0])
    assert first.link_preview_options == SHOWN and first.version == 1
    assert last.link_preview_options == {"is_disabled": True} and last.version == 2


@pytest.mark.parametrize(
    ("options", "wrong"),
    [
        ('"yes"', "LinkPreviewOptions JSON object"),
        ('{"is_disabled": "no"}', "'is_disabled' must be a Boolean"),
        ('{"prefer_small_media": true, "prefer_large_media": true}', "can't both be set"),
        ('{"url": "ftp://x.org/a.png"}', "url must be an HTTP or HTTPS URL"),
        ("{oops", "can't parse link_preview_options JSON object"),
    ],
)
def test_the_local_server_refuses_link_preview_options_telegram_would(
    api: localapi.LocalBotApi, options: str, wrong: str
) -> None:
    params = {"chat_id": "11", "text": "hi", "link_preview_options": options}
    answer = httpx.post(f"{api.base_url}{TOKEN}/sendMessage", data=params)
    assert answer.status_code == 400 and wrong in answer.json()["description"]
