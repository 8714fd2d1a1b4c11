"""The Riverside Gazette, served by the demo's page server: the news feed with its
links pointing at local article pages, each page with its article and an og:image.

    files = site.files(web_url)        # path -> webchat.StaticFile, for WebChat.files

The news pipeline drafts from these articles (`full_text: true`), and its cards show
each page's picture. Pictures are drawn here (a PNG banner in the story's colours), so
the demo needs no network and ships no binary files.
"""

from __future__ import annotations

import html
import struct
import zlib
from dataclasses import dataclass

from bot.demo import webchat
from bot.demo.content import FEEDS

#: Where the bundled feed's links point; the page server serves these paths itself.
ORIGIN = "https://gazette.example.org/"
#: The local path the site's pages and pictures live under.
PREFIX = "/gazette/"
#: The banner's size in pixels: the shape of a link preview's large picture.
WIDTH, HEIGHT = 600, 315


@dataclass(frozen=True)
class Article:
    title: str
    paragraphs: tuple[str, ...]
    #: The banner's two colours (RGB): sky and ground.
    colours: tuple[tuple[int, int, int], tuple[int, int, int]]


ARTICLES = {
    "2024/05/13/main-street-bike-lanes": Article(
        "Council approves bike lanes on Main Street",
        (
            "The city council voted 7-2 on Monday night to add protected bike lanes along"
            " Main Street between the station and the river bridge, the first such lanes in"
            " Riverside.",
            "Work starts in September and takes about ten weeks. The lanes remove 40 of the"
            " street's 160 parking spaces; the council says the new car park behind the"
            " library, opening in August with 120 spaces, makes up the difference.",
            "Shop owners were split at the hearing. The bakery and the bookshop spoke for the"
            " lanes; two cafés asked for loading bays, which the final plan now includes.",
        ),
        ((120, 180, 230), (70, 140, 80)),
    ),
    "2024/05/12/library-weekend-hours": Article(
        "Library extends weekend opening hours",
        (
            "From 1 June the central library opens from 9:00 to 18:00 on Saturdays and from"
            " 11:00 to 16:00 on Sundays, after a survey in which 68% of members asked for"
            " longer weekend hours.",
            "The extra hours are paid for by closing one hour earlier on Tuesday evenings,"
            " the quietest time of the week, so no new staff are needed.",
        ),
        ((240, 200, 120), (150, 90, 60)),
    ),
    "2024/05/12/elm-road-closure": Article(
        "Water main repair closes Elm Road until Friday",
        (
            "Elm Road is closed between Oak Lane and the school while crews replace a burst"
            " water main. Buses 4 and 12 are diverted via Mill Street.",
            "The water company expects to reopen the road on Friday morning. Homes on Elm"
            " Road keep their water supply; a few may notice low pressure in the evenings.",
        ),
        ((160, 170, 180), (90, 90, 100)),
    ),
    "2024/05/11/rovers-cup-final": Article(
        "Riverside Rovers reach county cup final",
        (
            "A late header from captain Dana Ortiz gave the Rovers a 2-1 win over Hillford"
            " in the semi-final, the club's first final in eleven years.",
            "The final is on 25 May at the county ground. The club has 600 tickets for its"
            " supporters, on sale at the clubhouse from Wednesday.",
        ),
        ((110, 190, 240), (40, 150, 60)),
    ),
    "2024/05/10/farmers-market-park": Article(
        "Farmers' market moves to the riverside park for the summer",
        (
            # "bustling": a word machine prose leans on, so this card shows a tells line.
            "From June to September the bustling Saturday farmers' market moves from the"
            " station car park to the riverside park, with room for twenty more stalls.",
            "The market keeps its hours, 8:00 to 13:00. Parking is at the leisure centre,"
            " and a free shuttle runs from the station every fifteen minutes.",
        ),
        ((250, 220, 150), (120, 170, 70)),
    ),
}


def files(web_url: str) -> dict[str, webchat.StaticFile]:
    """The feed (links made local) and every article page and picture, by path."""
    base = web_url.rstrip("/") + PREFIX
    feed = FEEDS["/feeds/demo.xml"].read_text().replace(ORIGIN, base)
    served = {"/feeds/demo.xml": webchat.StaticFile.of(feed.encode(), "application/rss+xml")}
    for path, article in ARTICLES.items():
        picture = f"{PREFIX}{path}.png"
        served[PREFIX + path] = webchat.StaticFile.of(page(article, picture), "text/html")
        served[picture] = webchat.StaticFile.of(banner(*article.colours), "image/png")
    return served


def page(article: Article, picture: str) -> bytes:
    """An article page as news sites make them: a menu, the story, a footer."""
    body = "".join(f"<p>{html.escape(p)}</p>" for p in article.paragraphs)
    title = html.escape(article.title)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f'<meta property="og:image" content="{html.escape(picture)}"></head><body>'
        '<nav><a href="/">Home</a> · <a href="/sport">Sport</a> · <a href="/weather">'
        f"Weather</a></nav><article><h1>{title}</h1>{body}</article>"
        "<footer>© Riverside Gazette · Contact · Privacy</footer></body></html>"
    ).encode()


def banner(sky: tuple[int, int, int], ground: tuple[int, int, int]) -> bytes:
    """A PNG: sky over ground, with a sun; enough to see that a card has a picture."""
    rows = []
    for y in range(HEIGHT):
        colour = bytes(sky if y < HEIGHT * 3 // 5 else ground)
        row = bytearray(colour * WIDTH)
        if 40 <= y < 100:  # the sun, a square of warm yellow
            row[3 * 460 : 3 * 520] = bytes((255, 214, 90)) * 60
        rows.append(b"\x00" + bytes(row))
    return _png(b"".join(rows))


def _png(raw: bytes) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", WIDTH, HEIGHT, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )
