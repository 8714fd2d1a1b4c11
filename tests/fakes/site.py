"""A local news site for full-text tests, the demo and the bench: a feed whose entries
link to article pages on the same server, each page with its og:image.

    with FeedServer() as server:
        site.serve(server, [site.Story("s1", "Title", "teaser", "the article ...")])
        server.url("/feed.xml")            # the feed; /articles/s1 the page
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from tests.fakes.feed_server import FeedServer


@dataclass(frozen=True)
class Story:
    guid: str
    title: str
    teaser: str
    #: The article's paragraphs, one string each; none: a page without an article.
    paragraphs: tuple[str, ...] = ()


def feed(server: FeedServer, stories: list[Story]) -> str:
    """An RSS document whose entries link to their pages on `server` (no feed images)."""
    items = "".join(
        f"<item><guid>{escape(s.guid)}</guid><title>{escape(s.title)}</title>"
        f"<link>{escape(server.url(page_path(s.guid)))}</link>"
        f"<description>{escape(s.teaser)}</description></item>"
        for s in stories
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel>'
        f"<title>Local news</title><link>{escape(server.url('/'))}</link>"
        f"<description>test</description>{items}</channel></rss>"
    )


def page_path(guid: str) -> str:
    return f"/articles/{guid}"


def image_path(guid: str) -> str:
    return f"/images/{guid}.png"


def page(server: FeedServer, story: Story) -> str:
    """The story's page: a menu, the article, a footer, and og:image in its head."""
    image = escape(server.url(image_path(story.guid)))
    body = "".join(f"<p>{escape(p)}</p>" for p in story.paragraphs)
    article = f"<article><h1>{escape(story.title)}</h1>{body}</article>" if body else ""
    return (
        f'<!doctype html><html><head><meta property="og:image" content="{image}">'
        f"<title>{escape(story.title)}</title></head><body>"
        '<nav><a href="/">Home</a> <a href="/sport">Sport</a></nav>'
        f"{article}<footer>© Local news</footer></body></html>"
    )


def serve(server: FeedServer, stories: list[Story]) -> None:
    """The feed at /feed.xml and each story's page."""
    server.set("/feed.xml", feed(server, stories), "application/rss+xml")
    for story in stories:
        server.set(page_path(story.guid), page(server, story), "text/html; charset=utf-8")
