"""RSS and Atom feeds, fetched with a conditional GET and parsed by feedparser.

YAML: `source: {type: rss, url: "https://example.org/feed.xml"}`. The ETag and
Last-Modified of the last answer are kept in `state`, so an unchanged feed costs a 304.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import io
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pipelines.sources import base, common, images

if TYPE_CHECKING:
    import httpx


class Config(common.WebSource):
    """An RSS or Atom feed at an http(s) URL."""

    type: Literal["rss"]


async def fetch(
    config: Config, state: Mapping[str, str], client: httpx.AsyncClient
) -> base.Fetched:
    """The feed's entries, or none (state kept) when the server answers 304 Not Modified."""
    headers = {"Accept": "application/rss+xml, application/atom+xml, application/xml, text/xml"}
    headers |= common.conditional_headers(state)
    response = await common.get(client, config.url, headers, config)
    if response.status_code == 304:
        return base.Fetched(items=[], state=dict(state))
    # Parse the bytes we fetched (a URL would make feedparser do its own I/O) and turn
    # the entries into items on a thread: a large feed takes long enough to stall the
    # bot's event loop.
    content_type = response.headers.get("content-type", "")
    items = await asyncio.to_thread(_parse, config.url, response.content, content_type)
    return base.Fetched(items=items, state=common.validators(response))


def _parse(url: str, content: bytes, content_type: str) -> list[base.FetchedItem]:
    import feedparser  # only a running engine needs it: the CLI starts without it

    parsed = feedparser.parse(io.BytesIO(content), response_headers={"content-type": content_type})
    if parsed.bozo and not parsed.entries:
        reason = parsed.get("bozo_exception", "no entries found")
        raise base.SourceError(f"feed {common.redact_url(url)} is malformed: {reason}")
    feed_title = str(parsed.feed.get("title", ""))
    return [_item(entry, feed_title) for entry in parsed.entries]


def _item(entry: Any, feed_title: str) -> base.FetchedItem:
    text = _text(entry)
    link = entry.get("link") or None
    title = _plain(entry.get("title_detail"), str(entry.get("title", ""))) or text[:80]
    extra: dict[str, Any] = {"feed_title": feed_title}
    if author := entry.get("author"):
        extra["author"] = str(author)
    # <category> (RSS) and <category term> (Atom): what a filter's `field: categories` reads.
    if categories := [str(tag.get("term")) for tag in entry.get("tags") or [] if tag.get("term")]:
        extra["categories"] = categories
    return base.FetchedItem(
        source_id=_source_id(entry, title, text),
        title=title,
        text=text,
        link=str(link) if link else None,
        published=_published(entry),
        image_url=images.from_entry(entry),
        extra=extra,
    )


def _text(entry: Any) -> str:
    # Atom <content> is usually the full body and <summary> a teaser: prefer the body.
    contents = entry.get("content") or []
    if contents:
        return _plain(contents[0], str(contents[0].get("value", "")))
    return _plain(entry.get("summary_detail"), str(entry.get("summary", "")))


def _plain(detail: Any, value: str) -> str:
    """The text as a reader sees it. feedparser has already decoded the XML's entities:
    plain text stays as it is, and only HTML is unescaped (once more) and stripped of tags,
    so "AT&amp;T &amp;lt;again&amp;gt;" reads "AT&T <again>", whatever the feed's style."""
    kind = detail.get("type", "text/html") if detail else "text/html"
    return value.strip() if kind == "text/plain" else common.html_to_text(value)


def _source_id(entry: Any, title: str, text: str) -> str:
    """guid / atom:id, else the link, else a hash of what the entry says."""
    if entry_id := entry.get("id"):
        return str(entry_id)
    if link := entry.get("link"):
        return str(link)
    digest = hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()
    return f"sha256:{digest}"


def _published(entry: Any) -> datetime | None:
    # feedparser normalises dates to UTC struct_time.
    parsed = entry.get("published_parsed") or entry.get("updated_parsed")
    if parsed is None:
        return None
    return datetime.fromtimestamp(calendar.timegm(parsed), tz=UTC)
