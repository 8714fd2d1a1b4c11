"""Image URLs on private hosts: a feed's enclosure or media image, and an article page's
og:image, on loopback, localhost, cloud metadata, a private range or a name resolving to
one, are dropped with a logged reason unless the source allows private addresses. Real
local servers, a local DNS server, a network that reaches nothing past loopback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from pipelines.config import spec
from pipelines.ground import httpclient
from pipelines.runs import engine
from pipelines.sources import articles, rss
from store import db, items
from store.items.machine import State
from tests.fakes import network
from tests.fakes.dns import DnsServer
from tests.fakes.feed_server import FeedServer
from tests.pipelines import test_engine

#: guid -> the image its entry names, and whether a strict source keeps it.
IMAGES = {
    "loopback": ("http://127.0.0.1:8080/a.png", False),
    "localhost": ("http://localhost/a.png", False),
    "metadata": ("http://169.254.169.254/latest/meta-data/a.png", False),
    "lan": ("https://10.1.2.3/a.png", False),
    "mapped": ("http://[::ffff:127.0.0.1]/a.png", False),
    "nat64": ("http://[64:ff9b::a9fe:a9fe]/a.png", False),
    "inward": ("https://inward.test/a.png", False),  # the name answers 10.0.0.7
    "unknown": ("https://nowhere.test/a.png", False),  # the name does not resolve
    "public": ("https://img.example.test/a.png", True),
    "literal": (f"https://{network.PUBLIC}/a.png", True),
}
FEED = (
    '<?xml version="1.0"?><rss version="2.0" xmlns:media="http://search.yahoo.com/mrss/">'
    "<channel><title>t</title><link>https://example.org/</link><description>d</description>"
    + "".join(
        f"<item><guid>{guid}</guid><title>{guid}</title><link>https://example.org/{guid}</link>"
        f'<description>x</description><media:content url="{url}" medium="image"/></item>'
        for guid, (url, _) in IMAGES.items()
    )
    + "</channel></rss>"
)
#: localhost as a hosts file answers it.
ANSWERS = {
    "inward.test": ["10.0.0.7"],
    "img.example.test": [network.PUBLIC],
    "localhost": ["127.0.0.1"],
}


def pipeline(directory: Path, url: str, *, private: bool) -> spec.Pipeline:
    source = f"  - type: rss\n    url: {url}\n    allow_private_addresses: {str(private).lower()}\n"
    (directory / "news.yaml").write_text(test_engine.PIPELINE.format(name="news", sources=source))
    loaded = spec.load_dir(directory)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    return loaded.pipelines["news"]


@pytest.fixture
def feed() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set("/feed.xml", FEED, "application/rss+xml")
        yield server


async def images_of(
    store: db.Store, news: spec.Pipeline, now: datetime, asked: list[str] | None = None
) -> dict[str, object]:
    """Each item's kept image after one tick; the names the DNS server was asked go in
    `asked`."""
    with DnsServer(ANSWERS) as dns:
        async with httpclient.fetching(resolve=dns.resolve, network=network.Network()) as client:
            await engine.Engine(store, {"news": news}, client=client).tick("news", "manual", now)
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    (asked if asked is not None else []).extend(dns.queries)
    return {item.source_id: item.payload.get("image_url") for item in waiting}


async def test_a_feed_image_on_a_private_host_is_dropped_and_the_log_says_why(
    store: db.Store, feed: FeedServer, tmp_path: Path, now: datetime,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    news = pipeline(tmp_path, feed.url("/feed.xml"), private=False)
    asked: list[str] = []
    with caplog.at_level(logging.WARNING, "pipelines.sources.images"):
        found = await images_of(store, news, now, asked)
    assert found == {guid: url if kept else None for guid, (url, kept) in IMAGES.items()}
    assert sorted(asked) == ["img.example.test", "inward.test", "localhost", "nowhere.test"]
    said = "\n".join(caplog.messages)
    assert "item metadata: its image is dropped: 169.254.169.254 resolves to a private" in said
    assert "item localhost: its image is dropped: localhost resolves to a private" in said
    assert "item inward: its image is dropped: inward.test resolves to a private address" in said
    assert "item unknown: its image is dropped: the name nowhere.test did not resolve" in said
    assert "item public" not in said


async def test_a_source_that_allows_private_addresses_keeps_every_image(
    store: db.Store, feed: FeedServer, tmp_path: Path, now: datetime
) -> None:
    news = pipeline(tmp_path, feed.url("/feed.xml"), private=True)
    assert await images_of(store, news, now) == {g: url for g, (url, _) in IMAGES.items()}


@pytest.mark.parametrize(
    ("image", "kept"),
    [("http://169.254.169.254/x.png", False), ("https://inward.test/x.png", False),
     ("http://localhost/x.png", False), ("/relative/x.png", True)],
)  # fmt: skip
async def test_an_article_pages_og_image_on_a_private_host_is_dropped(
    image: str, kept: bool, caplog: pytest.LogCaptureFixture
) -> None:
    body = "<p>" + "A sentence of the public article, long enough to count. " * 8 + "</p>"
    page = (
        f'<html><head><meta property="og:image" content="{image}"></head>'
        f"<body><article>{body}</article></body></html>"
    )
    source = rss.Config.model_validate({"type": "rss", "url": "https://example.org/f.xml"})
    with FeedServer() as site, DnsServer(ANSWERS | {"news.test": [network.PUBLIC]}) as dns:
        site.set("/story", page, "text/html")
        net = network.Network({network.PUBLIC: site.port})
        async with httpclient.fetching(resolve=dns.resolve, network=net) as client:
            with caplog.at_level(logging.WARNING, "pipelines.sources.images"):
                article = await articles.Fetcher(client).fetch("http://news.test/story", source, "")
    assert article.text is not None
    if kept:
        assert article.image_url == "http://news.test/relative/x.png"
    else:
        assert article.image_url is None
        assert "http://news.test/story: its image is dropped" in "\n".join(caplog.messages)
