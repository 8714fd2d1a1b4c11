"""A delivery's image in each dispatch kind: a channel photo or preview, the webhook's
`image_url`, the file's front matter, a link in the mail."""

from __future__ import annotations

import dataclasses
import email
import email.policy
from pathlib import Path
from typing import Any

import httpx
import telegram

from bot.demo.botapi import localapi
from pipelines import dispatch
from pipelines.dispatch import file as dispatch_file
from tests.fakes.smtp_server import Recorder
from tests.fakes.webhook_server import Reply, WebhookServer
from tests.pipelines import test_dispatch
from tests.pipelines.test_dispatch import CHANNEL, channel, email_delivery, smtp_target, webhook

# The fixtures of the dispatch tests, shared.
bot_api = test_dispatch.bot_api
hook = test_dispatch.hook
mail_server = test_dispatch.mail_server

IMAGE = "https://img.example.org/story.jpg"
PREVIEW = {"url": IMAGE, "show_above_text": True, "prefer_large_media": True}


def with_image(text: str = "Short <b>post</b> & more") -> dispatch.Delivery:
    return dispatch.Delivery.build(
        item_id=42, pipeline="news", version=2, attempt=1, text=text, title="A title",
        link="https://example.org/a", image_url=IMAGE,
    )  # fmt: skip


async def test_a_short_post_is_one_photo_with_its_text_as_caption(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot], client: httpx.AsyncClient
) -> None:
    api, bot = bot_api
    result = await dispatch.dispatch(channel(), with_image(), client=client, bot=bot)
    (posted,) = api.sent(CHANNEL)
    assert posted.photo_url == IMAGE and posted.text == "Short <b>post</b> & more"
    assert [c.method for c in api.calls() if c.method != "getMe"] == ["sendPhoto"]
    assert result.external_id == str(posted.message_id) and "a photo" in result.detail


async def test_a_caption_at_the_limit_is_a_photo_and_one_over_is_a_message_with_a_preview(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot], client: httpx.AsyncClient
) -> None:
    api, bot = bot_api
    # "&" becomes "&amp;" on the wire: only the parsed text counts against the limit.
    at_limit, over = "&" * 700 + "x" * 324, "&" * 700 + "x" * 325
    await dispatch.dispatch(channel(), with_image(at_limit), client=client, bot=bot)
    await dispatch.dispatch(channel(), with_image(over), client=client, bot=bot)
    photo, message = api.sent(CHANNEL)
    assert photo.photo_url == IMAGE and len(photo.text) == 1024
    assert message.photo_url is None and message.text == over
    assert message.link_preview_options == PREVIEW
    assert [c.method for c in api.calls() if c.method != "getMe"] == ["sendPhoto", "sendMessage"]


async def test_a_long_post_shows_the_image_as_its_first_messages_preview(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot], client: httpx.AsyncClient
) -> None:
    api, bot = bot_api
    text = "".join(f"line {n} " + "x" * 50 + "\n" for n in range(100))  # 2 messages
    await dispatch.dispatch(channel(), with_image(text), client=client, bot=bot)
    first, second = api.sent(CHANNEL)
    assert first.link_preview_options == PREVIEW and second.link_preview_options is None


def test_the_local_server_refuses_a_caption_over_the_limit_and_a_photo_it_cannot_name() -> None:
    with localapi.LocalBotApi() as api:
        refuses(f"{api.base_url}{test_dispatch.TOKEN}/sendPhoto")


def refuses(send: str) -> None:
    long = httpx.post(send, data={"chat_id": CHANNEL, "photo": IMAGE, "caption": "x" * 1025})
    assert long.status_code == 400 and "caption is too long" in long.json()["description"]
    parsed = {"chat_id": CHANNEL, "photo": IMAGE, "caption": "<b>" + "x" * 1024 + "</b>"}
    assert httpx.post(send, data=parsed | {"parse_mode": "HTML"}).status_code == 200
    named = httpx.post(send, data={"chat_id": CHANNEL, "photo": "not-a-file-id"})
    assert named.status_code == 400 and "wrong file identifier" in named.json()["description"]


async def test_the_webhook_body_has_image_url(
    hook: WebhookServer, client: httpx.AsyncClient
) -> None:
    hook.script(Reply(200, b"{}"))
    await dispatch.dispatch(webhook(hook.url), with_image(), client=client)
    (request,) = hook.requests
    assert request.json()["image_url"] == IMAGE


async def test_the_file_names_the_image_in_its_front_matter(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    target = dispatch.FileTarget(type="file", path=tmp_path)
    await dispatch.dispatch(target, with_image(), client=client)
    assert dispatch_file.read_front_matter(tmp_path / "news-42-v2.md")["image"] == IMAGE


async def test_the_mail_links_the_image(
    mail_server: tuple[Recorder, Any], client: httpx.AsyncClient
) -> None:
    recorder, controller = mail_server
    delivery = dataclasses.replace(email_delivery(), image_url=IMAGE)
    await dispatch.dispatch(smtp_target(controller), delivery, client=client)
    (envelope,) = recorder.envelopes
    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert message.get_content().rstrip().endswith(f"Image: {IMAGE}")


async def test_a_picture_telegram_cannot_fetch_leaves_the_post_as_text(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot], client: httpx.AsyncClient
) -> None:
    api, bot = bot_api
    refused = "Bad Request: failed to get HTTP URL content"
    api.fail_next("sendPhoto", 400, description=refused)
    result = await dispatch.dispatch(channel(), with_image(), client=client, bot=bot)
    (posted,) = api.sent(CHANNEL)
    assert posted.photo_url is None and posted.text == "Short <b>post</b> & more"
    assert posted.link_preview_options == PREVIEW and "1 message(s)" in result.detail
