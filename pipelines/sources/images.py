"""An item's image: found in a feed entry or an article page, kept as a checked URL.

    url = images.from_entry(entry)      # enclosure, media:content, media:thumbnail, Atom link
    url = images.checked(raw)           # None unless an http(s) URL of a bounded length

Only the URL is kept with the item (never the bytes): Telegram fetches it for the
card's preview and for a channel post.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

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
        *(link.get("href") for link in entry.get("links") or []
          if link.get("rel") == "enclosure" and _is_image(link.get("type"))),
        *(media.get("url") for media in entry.get("media_content") or []
          if media.get("medium") == "image" or _is_image(media.get("type"))),
        *(thumbnail.get("url") for thumbnail in entry.get("media_thumbnail") or []),
    ]  # fmt: skip
    return next((found for url in candidates if (found := checked(url))), None)


def _is_image(kind: object) -> bool:
    return isinstance(kind, str) and kind.strip().lower().startswith("image/")
