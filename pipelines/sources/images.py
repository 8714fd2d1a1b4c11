"""An item's image: found in a feed entry or an article page, kept as a checked URL.

    url = images.from_entry(entry)      # enclosure, media:content, media:thumbnail, Atom link
    url = images.checked(raw)           # None unless an http(s) URL of a bounded length
    found = await images.public(found, allow_private=False)   # private hosts' images dropped

Only the URL is kept with the item (never the bytes): Telegram fetches it for the
card's preview and for a channel post, and a self-hosted Bot API server would fetch it
from the operator's own network. So unless the source sets `allow_private_addresses`,
an image whose host is or resolves to a private address (addresses.refusal) is dropped,
and a warning says why.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import urllib.parse
from typing import Any

from pipelines.ground import addresses
from pipelines.sources import base

log = logging.getLogger(__name__)

#: The longest image URL kept (characters): longer ones are tracking links, not pictures,
#: and every card and dispatch carries the URL.
MAX_URL_CHARS = 2_048


def checked(url: object) -> str | None:
    """`url` when it is an absolute http(s) URL of at most MAX_URL_CHARS characters with no
    whitespace or control characters; None otherwise (an image is never worth an error)."""
    if not isinstance(url, str):
        return None
    url = url.strip()
    if not url or len(url) > MAX_URL_CHARS or any(ch.isspace() or ord(ch) < 32 for ch in url):
        return None
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    return url


def from_entry(entry: Any) -> str | None:
    """The first image a feedparser entry names: an RSS enclosure or Atom link of an image
    type, then `media:content` (an image medium or type), then `media:thumbnail`."""
    candidates = [
        *(
            link.get("href")
            for link in entry.get("links") or []
            if link.get("rel") == "enclosure" and _is_image(link.get("type"))
        ),
        *(
            media.get("url")
            for media in entry.get("media_content") or []
            if media.get("medium") == "image" or _is_image(media.get("type"))
        ),
        *(thumbnail.get("url") for thumbnail in entry.get("media_thumbnail") or []),
    ]
    return next((found for url in candidates if (found := checked(url))), None)


def _is_image(kind: object) -> bool:
    return isinstance(kind, str) and kind.strip().lower().startswith("image/")


async def public(
    items: list[base.FetchedItem],
    *,
    allow_private: bool,
    resolve: addresses.Resolver = addresses.system_resolve,
) -> list[base.FetchedItem]:
    """`items` with every image on a private host dropped (unless `allow_private`), each
    drop logged with its reason. Each host is looked up once, all at once."""
    if allow_private:
        return items
    urls = {_host(item.image_url): item.image_url for item in items if item.image_url}
    reasons = await asyncio.gather(*(addresses.refusal(u, resolve=resolve) for u in urls.values()))
    refused = dict(zip(urls, reasons, strict=True))
    kept = []
    for item in items:
        reason = refused.get(_host(item.image_url)) if item.image_url else None
        if reason:
            log.warning("item %s: its image is dropped: %s", item.source_id, reason)
            item = dataclasses.replace(item, image_url=None)
        kept.append(item)
    return kept


async def shown(
    url: str | None, *, allow_private: bool, about: str, resolve: addresses.Resolver
) -> str | None:
    """`url` unless its host is private and `allow_private` is false (logged, for `about`)."""
    if not url or allow_private:
        return url
    if reason := await addresses.refusal(url, resolve=resolve):
        log.warning("%s: its image is dropped: %s", about, reason)
        return None
    return url


def _host(url: str | None) -> str:
    return (urllib.parse.urlsplit(url or "").hostname or "").lower()
