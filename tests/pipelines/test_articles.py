"""Fetching an article: redirects followed and each hop checked, private addresses
refused unless allowed, at most PER_HOST fetches of one host at once. Real sockets to a
local site."""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import Iterator

import httpx
import pytest

from pipelines.sources import articles, rss
from tests.fakes.feed_server import FeedServer

BODY = "<p>" + "A sentence of the article, long enough to count as one. " * 8 + "</p>"
PAGE = f"<html><body><article><h1>Story</h1>{BODY}</article></body></html>"


def source(**fields: object) -> rss.Config:
    values = {"type": "rss", "url": "https://example.org/feed.xml", "timeout_seconds": 5}
    return rss.Config.model_validate(values | {"allow_private_addresses": True} | fields)


@pytest.fixture
def site() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set("/story", PAGE, "text/html")
        yield server


async def test_a_redirect_is_followed_to_the_article(
    site: FeedServer, client: httpx.AsyncClient
) -> None:
    site.set("/old", "", "text/html", status=301, headers={"Location": "/story"})
    article = await articles.Fetcher(client).fetch(site.url("/old"), source(), "ua")
    assert article.text is not None and "A sentence of the article" in article.text
    assert [r.path for r in site.requests] == ["/old", "/story"]


async def test_too_many_redirects_fall_back_with_the_reason(
    site: FeedServer, client: httpx.AsyncClient
) -> None:
    site.set("/loop", "", "text/html", status=302, headers={"Location": "/loop"})
    article = await articles.Fetcher(client).fetch(site.url("/loop"), source(), "ua")
    assert article.text is None and article.reason is not None
    assert f"more than {articles.MAX_REDIRECTS} redirects" in article.reason
    assert len(site.requests) == articles.MAX_REDIRECTS + 1


async def test_a_redirect_to_a_private_address_is_refused(client: httpx.AsyncClient) -> None:
    """A public page may not send the fetch inward: every hop is checked."""
    fetcher = articles.Fetcher(client)
    found = await fetcher.fetch("http://127.0.0.1:9/x", source(allow_private_addresses=False), "")
    assert found.reason is not None and "private address (127.0.0.1)" in found.reason
    metadata = "http://169.254.169.254/latest/meta-data/"
    found = await fetcher.fetch(metadata, source(allow_private_addresses=False), "")
    assert found.reason is not None and "private address (169.254.169.254)" in found.reason


@pytest.mark.parametrize(
    ("link", "reason"),
    [(None, "the item has no link"), ("ftp://example.org/a", "not an http:// or https:// URL")],
)
async def test_a_link_that_cannot_be_fetched_says_why(
    client: httpx.AsyncClient, link: str | None, reason: str
) -> None:
    article = await articles.Fetcher(client).fetch(link, source(), "ua")
    assert article.text is None and article.reason is not None and reason in article.reason


async def test_a_page_that_is_not_html_is_not_read_as_an_article(
    site: FeedServer, client: httpx.AsyncClient
) -> None:
    site.set("/file.pdf", b"%PDF-1.7", "application/pdf")
    article = await articles.Fetcher(client).fetch(site.url("/file.pdf"), source(), "ua")
    assert article.reason is not None and "is not a web page (application/pdf)" in article.reason


async def test_at_most_two_fetches_of_one_host_run_at_once(
    site: FeedServer, client: httpx.AsyncClient
) -> None:
    """Six pages of one host held open by the server: two requests arrive, the rest wait."""
    release = threading.Event()
    arrived: list[str] = []
    original = site._record

    def held(request: object) -> object:
        arrived.append(str(getattr(request, "path", "")))
        release.wait(10)
        return original(request)  # type: ignore[arg-type]

    site._record = held  # type: ignore[method-assign]
    fetcher = articles.Fetcher(client)
    links = [site.url(f"/story?n={n}") for n in range(6)]
    fetches = asyncio.gather(*(fetcher.fetch(link, source(), "ua") for link in links))
    task = asyncio.ensure_future(fetches)
    for _ in range(500):  # a bound, not a speed: until the first two are held
        if len(arrived) >= articles.PER_HOST:
            break
        await asyncio.sleep(0.01)
    # Room for a third to arrive were the gate broken; a working gate never fails here.
    await asyncio.sleep(0.2)
    assert len(arrived) == articles.PER_HOST
    release.set()
    found = await task
    assert all(a.text for a in found) and len(arrived) == len(links)
    assert fetcher._hosts == {}  # nothing kept for a host once its fetches are done


async def test_pages_are_extracted_off_the_loop_one_at_a_time(
    site: FeedServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Extraction on the loop's thread would stall the bot; two extractions at once only
    make the loop wait longer for the GIL. Each extraction waits a moment for another to
    start beside it: with more than one thread one would."""
    real = articles.extract
    lock = threading.Lock()
    running: list[int] = []
    beside = threading.Event()
    seen: list[tuple[int, int]] = []  # (thread, extractions running when it began)

    def watched(page: bytes, url: str) -> tuple[str | None, str | None]:
        with lock:
            running.append(threading.get_ident())
            seen.append((threading.get_ident(), len(running)))
            if len(running) > 1:
                beside.set()
        beside.wait(0.2)
        try:
            return real(page, url)
        finally:
            with lock:
                running.remove(threading.get_ident())

    monkeypatch.setattr(articles, "extract", watched)
    fetcher = articles.Fetcher(client)
    links = [site.url(f"/story?n={n}") for n in range(articles.PER_HOST)]
    found = await asyncio.gather(*(fetcher.fetch(link, source(), "ua") for link in links))
    assert all(a.text for a in found) and len(seen) == len(links)
    assert threading.get_ident() not in {thread for thread, _ in seen}
    assert [at_once for _, at_once in seen] == [1] * len(links)


async def test_a_page_without_og_image_gives_its_twitter_image(
    site: FeedServer, client: httpx.AsyncClient
) -> None:
    head = "<head><meta name='twitter:image' content='/pictures/lead.jpg'></head>"
    site.set("/tweeted", f"<html>{head}<body><article>{BODY}</article></body></html>", "text/html")
    article = await articles.Fetcher(client).fetch(site.url("/tweeted"), source(), "ua")
    assert article.text is not None
    assert article.image_url == site.url("/pictures/lead.jpg")


async def test_a_page_that_inflates_past_the_cap_falls_back_with_the_reason(
    site: FeedServer, client: httpx.AsyncClient
) -> None:
    page = PAGE.encode() + b" " * 50_000
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    site.set("/big", packer.compress(page) + packer.flush(), "text/html",
             headers={"Content-Encoding": "gzip"})  # fmt: skip
    tight = source(max_decompressed_bytes=len(page) - 1)
    article = await articles.Fetcher(client).fetch(site.url("/big"), tight, "ua")
    assert article.text is None
    assert article.reason is not None and "larger than max_decompressed_bytes" in article.reason
    roomy = await articles.Fetcher(client).fetch(site.url("/big"), source(), "ua")
    assert roomy.text is not None and "A sentence of the article" in roomy.text


async def test_the_articles_heading_is_not_part_of_its_text(
    site: FeedServer, client: httpx.AsyncClient
) -> None:
    """A draft's {text} follows its {title}: the page's own heading would say it twice."""
    head = "<head><title>Library extends weekend hours</title></head>"
    heading = "<h1>Library  extends weekend hours</h1>"
    site.set("/library", f"<html>{head}<body><article>{heading}{BODY}</article></body></html>",
             "text/html")  # fmt: skip
    article = await articles.Fetcher(client).fetch(site.url("/library"), source(), "ua")
    assert article.text is not None and article.text.startswith("A sentence of the article")
    # A first line that is not the title is the article's own.
    assert articles.without_heading("Opening\nbody", "Library") == "Opening\nbody"
    assert articles.without_heading("Library.\nbody", "library") == "body"
