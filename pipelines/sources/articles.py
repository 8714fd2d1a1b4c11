"""Full text: an item's linked article, fetched within bounds and reduced to its main text.

YAML, on an `rss` or `http_json` source: `full_text: true` (and, for a site on your own
network, `allow_private_addresses: true`).

    fetcher = articles.Fetcher(client)                  # one per engine
    article = await fetcher.fetch(link, source, articles.user_agent("news"))
    article.text       # the article's main text (without its heading), or None: the teaser
    article.reason     # why not ("GET ... timed out after 30 s", "no article found ...")
    article.image_url  # the page's og:image / twitter:image, or None (or on a private host)

The page is fetched as a source's answer is (common.get: the source's timeout for the
whole fetch, its byte caps on the wire and decompressed), following at most
MAX_REDIRECTS redirects, each hop's connection refused when its host resolves to a
private address (the client's one lookup is judged, then dialed: pipelines.ground.dialer), at
most PER_HOST fetches at once per host. Extraction (trafilatura) runs off the event
loop, on the process's one extraction thread: parsing a large page there would stall
the bot.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pipelines.ground import addresses
from pipelines.sources import base, common, images

if TYPE_CHECKING:
    import httpx

#: Redirects followed at most for one article (each hop checked as the first).
MAX_REDIRECTS = 5
#: Fetches of one host at once, so a feed of 1,000 links is no burst against its site.
PER_HOST = 2
#: Less main text than this (characters) is a page's menus and footer, not an article.
MIN_ARTICLE_CHARS = 200
#: The longest fallback reason kept for the card (characters).
MAX_REASON_CHARS = 300
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Pages extracted at once in the whole process. Extraction holds the GIL nearly all
#: along, so a second thread adds no speed, and every thread waiting for the GIL makes
#: the event loop wait longer for it after each socket call it makes (asyncio's default
#: pool would run up to 6 at once: in `bench tick --full-text` the loop's p99 lag about
#: doubled against one thread).
EXTRACTORS = 1
#: A page that has the extractor load all it keeps for the process's life (see warm).
_WARM_PAGE = (
    b"<html><head><meta property='og:image' content='/w.png'></head><body><article><p>"
    + b"warm " * 60
    + b"</p></article></body></html>"
)
#: Threads start on first use, so a process that never extracts starts none.
_extracting = concurrent.futures.ThreadPoolExecutor(EXTRACTORS, thread_name_prefix="extract")


class Source(common.Bounded, Protocol):
    """What a source with links declares for full text (rss, http_json), besides the
    timeout and limits that bound each GET."""

    full_text: bool
    allow_private_addresses: bool


@dataclass(frozen=True)
class Article:
    """What full text gave for one item: its text, or why the teaser is used instead."""

    text: str | None
    image_url: str | None = None
    reason: str | None = None


def user_agent(pipeline: str) -> str:
    """The User-Agent a pipeline's article fetches send: a site can tell who reads it."""
    return f"gatehouse (pipeline {pipeline})"


class Fetcher:
    """Fetches articles for one engine, at most PER_HOST at once per host."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        #: host -> (its gate, how many fetches hold or wait for it); dropped at zero, so
        #: a feed linking to many sites leaves nothing behind.
        self._hosts: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @contextlib.asynccontextmanager
    async def _turn(self, host: str) -> AsyncIterator[None]:
        gate, users = self._hosts.get(host, (asyncio.Semaphore(PER_HOST), 0))
        self._hosts[host] = (gate, users + 1)
        try:
            async with gate:
                yield
        finally:
            gate, users = self._hosts[host]
            if users == 1:
                del self._hosts[host]
            else:
                self._hosts[host] = (gate, users - 1)

    async def fetch(self, link: str | None, source: Source, agent: str) -> Article:
        """The article at `link`, fetched within the source's bounds."""
        if not link:
            return Article(None, reason="the item has no link")
        host = (urllib.parse.urlsplit(link).hostname or "").lower()
        seconds = float(source.timeout_seconds)
        try:
            async with self._turn(host), asyncio.timeout(seconds):
                page, url = await self._get(link, source, agent)
        except TimeoutError:
            return Article(None, reason=f"the page timed out after {seconds:g} s")
        except base.SourceError as exc:
            return Article(None, reason=str(exc)[:MAX_REASON_CHARS])
        text, found = await _off_the_loop(page, url)
        image = await images.shown(
            found,
            allow_private=source.allow_private_addresses,
            about=common.redact_url(link),
            resolve=addresses.resolver_of(self.client),
        )
        if not text:
            return Article(None, image, reason="no article found on the page")
        return Article(text, image)

    async def _get(self, link: str, source: Source, agent: str) -> tuple[bytes, str]:
        headers = {"User-Agent": agent, "Accept": "text/html, application/xhtml+xml"}
        url = link
        for _ in range(MAX_REDIRECTS + 1):
            _check_link(url)
            response = await common.get(
                self.client, url, headers, source, public_only=not source.allow_private_addresses
            )
            if response.status_code not in _REDIRECTS:
                return _page(response, url), url
            location = response.headers.get("location")
            if not location:
                raise base.SourceError(f"{common.redact_url(url)} redirected without a Location")
            url = urllib.parse.urljoin(url, location)
        raise base.SourceError(
            f"more than {MAX_REDIRECTS} redirects from {common.redact_url(link)}"
        )


async def warm() -> None:
    """Load the extractor and the tables it builds on first use (trafilatura, and the
    domain list its URL checks read: some 30,000 objects) on the extraction thread.
    A start-up that awaits this before gc.freeze() keeps them out of every later full
    collection, which walks all it has not frozen while it holds the GIL, and so the
    event loop (in `bench tick --full-text`, about 25,000 fewer objects to walk)."""
    await _off_the_loop(_WARM_PAGE, "https://example.org/")


async def _off_the_loop(page: bytes, url: str) -> tuple[str | None, str | None]:
    """extract() on the extraction thread, in this task's context (its log fields)."""
    run = functools.partial(contextvars.copy_context().run, extract, page, url)
    return await asyncio.get_running_loop().run_in_executor(_extracting, run)


def _page(response: common.Response, url: str) -> bytes:
    shown = common.redact_url(url)
    if response.status_code != 200:
        raise base.SourceError(f"GET {shown} answered HTTP {response.status_code}")
    kind = response.headers.get("content-type", "text/html").split(";")[0].strip().lower()
    if kind not in ("text/html", "application/xhtml+xml", ""):
        raise base.SourceError(f"GET {shown} is not a web page ({kind})")
    return response.content


def extract(page: bytes, url: str) -> tuple[str | None, str | None]:
    """The page's main text (None: no article) and its og:image / twitter:image."""
    import trafilatura  # loaded on this thread at first use: the CLI starts without it

    found = trafilatura.bare_extraction(
        page,
        url=url,
        with_metadata=True,
        include_comments=False,
        include_tables=False,
        favor_precision=True,
    )
    if found is None or isinstance(found, dict):
        return None, None
    image = images.checked(urllib.parse.urljoin(url, found.image)) if found.image else None
    text = without_heading((found.text or "").strip(), found.title)
    return (text if len(text) >= MIN_ARTICLE_CHARS else None), image


def without_heading(text: str, title: str | None) -> str:
    """`text` without a first line that only repeats the page's title: the article's own
    heading is not body text, and a prompt's {text} after its {title} would say it twice
    (a draft that opens "Library extends ...: Library extends ...")."""
    first, _, rest = text.partition("\n")
    if title and _words(first) == _words(title):
        return rest.strip()
    return text


def _words(line: str) -> str:
    # Case and spacing differ between a page's <title>, its <h1> and a feed's title.
    return " ".join(line.casefold().split()).rstrip(".:")


def _check_link(url: str) -> None:
    """Raise SourceError unless `url` is an http(s) URL with a host."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise base.SourceError("the link is not an http:// or https:// URL")
