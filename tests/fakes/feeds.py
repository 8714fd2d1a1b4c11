"""Build RSS documents for tests and benchmarks."""

from __future__ import annotations

from html import escape


def rss(entries: list[tuple[str, str, str]], title: str = "Test feed") -> str:
    """An RSS 2.0 document; each entry is (guid, title, description)."""
    items = "".join(
        f"<item><guid>{escape(guid)}</guid><title>{escape(head)}</title>"
        f"<link>https://example.org/{escape(guid)}</link>"
        f"<description>{escape(body)}</description></item>"
        for guid, head, body in entries
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel>'
        f"<title>{escape(title)}</title><link>https://example.org/</link>"
        f"<description>test</description>{items}</channel></rss>"
    )
