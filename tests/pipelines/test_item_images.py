"""An item's image: found in the feed, checked, kept with the draft version, on the card."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from pipelines.approval import flow
from pipelines.operations import review
from pipelines.runs import engine
from pipelines.sources import images
from store import backend, db, drafts, errors, items, outbox
from store.audit import events
from store.items.machine import State
from tests.fakes.feed_server import FeedServer
from tests.pipelines import test_review as review_tests
from tests.pipelines.test_engine import write_pipeline

MEDIA = 'xmlns:media="http://search.yahoo.com/mrss/"'
RSS = f"""<?xml version="1.0"?><rss version="2.0" {MEDIA}><channel><title>t</title>
<item><guid>enc</guid><title>Enclosure</title><link>https://example.org/enc</link>
  <description>a</description>
  <enclosure url="https://img.example.org/enc.mp3" type="audio/mpeg" length="1"/>
  <enclosure url="https://img.example.org/enc.jpg" type="image/jpeg" length="1"/></item>
<item><guid>media</guid><title>Media</title><link>https://example.org/media</link>
  <description>b</description>
  <media:content url="https://img.example.org/m.png" medium="image"/></item>
<item><guid>thumb</guid><title>Thumbnail</title><link>https://example.org/thumb</link>
  <description>c</description><media:thumbnail url="https://img.example.org/t.png"/></item>
<item><guid>unsafe</guid><title>Unsafe</title><link>https://example.org/unsafe</link>
  <description>d</description><media:thumbnail url="javascript:alert(1)"/></item>
<item><guid>long</guid><title>Long</title><link>https://example.org/long</link>
  <description>e</description>
  <enclosure url="https://img.example.org/{"x" * 3000}.png" type="image/png"/></item>
<item><guid>none</guid><title>None</title><link>https://example.org/none</link>
  <description>f</description></item>
</channel></rss>"""

ATOM = """<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>
<id>urn:t</id><updated>2024-05-13T09:00:00Z</updated>
<entry><id>atom-1</id><title>Atom</title><updated>2024-05-13T09:00:00Z</updated>
  <link href="https://example.org/atom"/>
  <link rel="enclosure" type="image/webp" href="https://img.example.org/a.webp"/>
  <summary>g</summary></entry></feed>"""

WANTED = {
    "enc": "https://img.example.org/enc.jpg",
    "media": "https://img.example.org/m.png",
    "thumb": "https://img.example.org/t.png",
    "unsafe": None,
    "long": None,
    "none": None,
    "atom-1": "https://img.example.org/a.webp",
}


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        server.set("/feed.xml", RSS, "application/rss+xml")
        server.set("/atom.xml", ATOM, "application/atom+xml")
        yield server


async def test_feed_images_reach_the_draft_and_the_card(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    urls = [feeds.url("/feed.xml"), feeds.url("/atom.xml")]
    pipeline = write_pipeline(tmp_path, "news", urls)
    await engine.Engine(store, {"news": pipeline}, client=client).tick("news", "manual", now)
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert sorted(i.source_id for i in waiting) == sorted(WANTED)
    cards = {c.item_id: c for c in await outbox.due(store, now, ["card"])}
    for item in waiting:
        wanted = WANTED[item.source_id]
        assert item.payload.get("image_url") == wanted, item.source_id
        assert (await drafts.get(store, item.id, 1)).image_url == wanted
        assert cards[item.id].payload["image_url"] == wanted


@pytest.mark.parametrize(
    "url",
    ["ftp://x.org/a.png", "https://", "/relative.png", "https://a b.org/x.png", "data:image/png,x",
     "https://x.org/\x00.png", 7],
)  # fmt: skip
def test_an_image_url_that_is_not_plain_http_is_dropped(url: object) -> None:
    assert images.checked(url) is None


def test_an_image_url_is_kept_up_to_its_bound() -> None:
    at_bound = "https://x.org/" + "a" * (images.MAX_URL_CHARS - len("https://x.org/"))
    assert images.checked(at_bound) == at_bound
    assert images.checked(at_bound + "a") is None


async def test_removing_the_image_is_refused_when_there_is_none_or_the_card_is_stale(
    store: db.Store, now: datetime
) -> None:
    item = await store.write(items.create_sync, "news", "s", "g1", {"title": "T"}, now)
    assert item is not None

    def drafted(conn: backend.Conn) -> None:
        drafts.add_sync(conn, item.id, drafts.Body("plain", {"drafter": "template"}), now)
        items.transition_sync(conn, item.id, State.DRAFTING, "system", now)
        items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", now)

    await store.write(drafted)
    with pytest.raises(errors.Conflict, match="has no image to remove"):
        await store.write(drafts.remove_image_sync, drafts.Edit(item.id, 1, 7), now)

    def pictured(conn: backend.Conn) -> None:
        drafts.add_sync(
            conn,
            item.id,
            drafts.Body("with", {"drafter": "template"}, image_url="https://x.org/i.png"),
            now,
        )

    await store.write(pictured)
    with pytest.raises(errors.Conflict, match="is at version 2; the edit was for version 1"):
        await store.write(drafts.remove_image_sync, drafts.Edit(item.id, 1, 7), now)
    removed = await store.write(drafts.remove_image_sync, drafts.Edit(item.id, 2, 7), now)
    assert (removed.version, removed.text, removed.image_url) == (3, "with", None)
    edited = await store.write(drafts.edit_sync, drafts.Edit(item.id, 3, 7), "new words", now)
    assert edited.image_url is None  # an edit keeps what the version it replaces shows


async def test_the_terminal_removes_the_image_as_the_card_button_does(
    store: db.Store, now: datetime
) -> None:
    p = review_tests.pipeline()
    item = await store.write(items.create_sync, "news", "s", "g1", {"title": "T"}, now)
    assert item is not None

    def pictured(conn: backend.Conn) -> None:
        image = "https://x.org/i.png"
        draft = drafts.add_sync(
            conn, item.id, drafts.Body("words", {"drafter": "t"}, image_url=image), now
        )
        items.transition_sync(conn, item.id, State.DRAFTING, "system", now)
        moved = items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", now)
        flow.queue_card(conn, p, moved, flow.Card(draft), now)

    await store.write(pictured)
    done = await review.at_terminal(
        store, {"news": p}, review.Typed("remove-image", item.id, "cli:ana"), now
    )
    assert done.said == "image removed: version 2" and done.item.version == 2
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert (last.actor, last.reason) == ("cli:ana", "image removed: version 1 -> 2")
    rows = sorted(await outbox.for_item(store, item.id, "card"), key=lambda r: r.id)
    cards = [r.payload for r in rows]
    assert [c.get("image_url") for c in cards] == ["https://x.org/i.png", None]
    assert cards[-1]["note"] == "image removed by cli:ana"
    with pytest.raises(errors.Conflict, match="has no image to remove"):
        await review.at_terminal(
            store, {"news": p}, review.Typed("remove-image", item.id, "cli:ana"), now
        )
