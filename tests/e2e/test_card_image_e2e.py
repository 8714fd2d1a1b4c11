"""End to end, the real bot process against the local Bot API server: a feed entry's
image on its card, removed with the card's button as a new version, and the approved
version dispatched without it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.demo.botapi import localapi
from pipelines.dispatch import file as dispatch_file
from store.audit import events
from tests.e2e import test_bot_e2e as e2e
from tests.fakes.feed_server import FeedServer

OPERATOR = e2e.OPERATOR
#: On a literal global address: the bot judges an image's host (a name would be looked up).
IMAGE = "https://93.184.215.14/bridge.jpg"
FEED = f"""<?xml version="1.0"?><rss version="2.0" xmlns:media="http://search.yahoo.com/mrss/">
<channel><title>t</title><link>https://example.org/</link><description>d</description>
<item><guid>g1</guid><title>Bridge vote</title><link>https://example.org/g1</link>
<description>The council votes on the bridge.</description>
<media:content url="{IMAGE}" medium="image"/></item></channel></rss>"""
SHOWN = {"url": IMAGE, "show_above_text": True, "prefer_large_media": True}


@pytest.fixture
def pictured(feed: FeedServer) -> FeedServer:
    feed.set("/feed.xml", FEED, "application/rss+xml")
    return feed


@pytest.fixture
def bot(
    tmp_path: Path, api: localapi.LocalBotApi, pictured: FeedServer
) -> Iterator[e2e.BotProcess]:
    (tmp_path / "pipelines").mkdir()
    text = e2e.PIPELINE.format(url=pictured.url("/feed.xml"), out=tmp_path / "out")
    (tmp_path / "pipelines" / "news.yaml").write_text(text)
    process = e2e.BotProcess(tmp_path, api).start()
    yield process
    process.stop()


def one_card(api: localapi.LocalBotApi, version: int) -> e2e.localapi_state.ChatMessage:
    def found() -> list[e2e.localapi_state.ChatMessage]:
        return [m for m in e2e.cards(api) if f"version {version} " in m.text]

    return api.wait_for(found, timeout=60)[0]  # a bound, not a speed


async def test_removing_the_image_gives_a_new_version_that_is_dispatched_without_it(
    bot: e2e.BotProcess, api: localapi.LocalBotApi, tmp_path: Path
) -> None:
    first = one_card(api, 1)
    assert first.link_preview_options == SHOWN
    answer = e2e.tap(api, OPERATOR, first, "Remove image")
    assert answer["text"] == "🖼 image removed: version 2 follows"
    old = e2e.version_of(api, first.message_id, 2)
    assert "image removed by" in old.text and old.reply_markup is None
    second = one_card(api, 2)
    assert second.link_preview_options == {"is_disabled": True}
    assert "Remove image" not in str(second.reply_markup)

    e2e.tap(api, OPERATOR, second, "Approve")
    written = tmp_path / "out" / f"news-{e2e.item_id_of(second)}-v2.md"
    api.wait_for(written.exists, timeout=30)
    front = dispatch_file.read_front_matter(written)
    assert front["version"] == 2 and "image" not in front
    history = await e2e.read(
        tmp_path / "data", lambda s: events.for_entity(s, "item", front["item"])
    )
    assert any((e.reason or "").startswith("image removed: version 1 -> 2") for e in history)
