"""Build RSS documents for tests and benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape


def rss(
    entries: list[tuple[str, str, str]], title: str = "Test feed", dates: Sequence[str] = ()
) -> str:
    """An RSS 2.0 document; each entry is (guid, title, description), and `dates` gives
    the first entries a pubDate ("Mon, 13 May 2024 09:30:00 GMT")."""
    published = [f"<pubDate>{escape(date)}</pubDate>" for date in dates]
    items = "".join(
        f"<item><guid>{escape(guid)}</guid><title>{escape(head)}</title>"
        f"<link>https://example.org/{escape(guid)}</link>{''.join(published[n : n + 1])}"
        f"<description>{escape(body)}</description></item>"
        for n, (guid, head, body) in enumerate(entries)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel>'
        f"<title>{escape(title)}</title><link>https://example.org/</link>"
        f"<description>test</description>{items}</channel></rss>"
    )
