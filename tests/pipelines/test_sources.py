"""The rss, http_json and folder sources against a real local HTTP server and real files."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest

from pipelines import sources
from pipelines.sources import base, common, folder, http_json, rss
from tests.fakes import feed_server

RSS = b"""<?xml version="1.0" encoding="utf-8"?>
<rss version="2.0"><channel><title>Example news</title><link>http://example.org/</link>
<item>
  <title>First &amp; foremost</title><guid isPermaLink="false">urn:news:1</guid>
  <link>http://example.org/1</link>
  <description>&lt;p&gt;Hello &lt;b&gt;world&lt;/b&gt; &amp;amp; friends&lt;/p&gt;</description>
  <pubDate>Tue, 02 Jan 2024 10:00:00 +0100</pubDate>
</item>
<item>
  <title>Link only</title><link>http://example.org/2</link>
  <description>Second item</description>
</item>
<item>
  <title>Nothing but words</title><description>Third item has no id</description>
</item>
</channel></rss>"""

ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Example atom</title>
<id>urn:feed</id><updated>2024-03-01T12:00:00Z</updated>
<entry>
  <title>Atom entry</title><id>urn:uuid:60a76c80-d399-11d9-b93C-0003939e0af6</id>
  <link href="http://example.org/a1"/><updated>2024-03-01T12:00:00Z</updated>
  <summary>Teaser</summary>
  <content type="html">&lt;div&gt;&lt;h1&gt;Body&lt;/h1&gt;
    &lt;p&gt;Full text&lt;/p&gt;&lt;/div&gt;</content>
</entry>
</feed>"""


@pytest.fixture
def server() -> Iterator[feed_server.FeedServer]:
    with feed_server.FeedServer() as running:
        yield running


def rss_config(url: str, **fields: Any) -> rss.Config:
    return rss.Config.model_validate({"type": "rss", "url": url, **fields})


def json_config(url: str, **fields: Any) -> http_json.Config:
    return http_json.Config.model_validate({"type": "http_json", "url": url, **fields})


# --- rss / atom ---------------------------------------------------------------------------


async def test_rss_items_with_id_fallbacks_and_plain_text(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set("/feed.xml", RSS, "application/rss+xml")
    fetched = await rss.fetch(rss_config(server.url("/feed.xml")), {}, client)
    first, second, third = fetched.items
    assert first.source_id == "urn:news:1"
    assert first.title == "First & foremost"
    assert first.text == "Hello world & friends"
    assert first.link == "http://example.org/1"
    assert first.published == datetime(2024, 1, 2, 9, 0, tzinfo=UTC)
    assert first.extra["feed_title"] == "Example news"
    assert second.source_id == "http://example.org/2"
    digest = hashlib.sha256(b"Nothing but words\nThird item has no id").hexdigest()
    assert third.source_id == f"sha256:{digest}"
    assert third.link is None


async def test_atom_prefers_content_over_summary(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set("/atom", ATOM, "application/atom+xml")
    fetched = await rss.fetch(rss_config(server.url("/atom")), {}, client)
    [entry] = fetched.items
    assert entry.source_id == "urn:uuid:60a76c80-d399-11d9-b93C-0003939e0af6"
    assert entry.text == "Body\n\nFull text"
    assert entry.link == "http://example.org/a1"
    assert entry.published == datetime(2024, 3, 1, 12, 0, tzinfo=UTC)


async def test_conditional_get_with_etag_returns_no_items_on_304(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set("/feed.xml", RSS, "application/rss+xml", etag='"v1"')
    config = rss_config(server.url("/feed.xml"))
    first = await rss.fetch(config, {}, client)
    assert len(first.items) == 3
    assert first.state == {"etag": '"v1"'}
    second = await rss.fetch(config, first.state, client)
    assert second.items == []
    assert second.state == first.state
    assert server.requests_to("/feed.xml")[-1].headers["If-None-Match"] == '"v1"'


async def test_conditional_get_with_last_modified(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    stamp = "Mon, 01 Jan 2024 00:00:00 GMT"
    server.set("/feed.xml", RSS, "application/rss+xml", last_modified=stamp)
    config = rss_config(server.url("/feed.xml"))
    first = await rss.fetch(config, {}, client)
    assert first.state == {"last_modified": stamp}
    assert (await rss.fetch(config, first.state, client)).items == []
    # The feed changes: the server's newer Last-Modified makes it answer in full again.
    server.set("/feed.xml", ATOM, "application/atom+xml", last_modified=stamp.replace("01", "02"))
    third = await rss.fetch(config, first.state, client)
    assert [item.title for item in third.items] == ["Atom entry"]
    assert server.requests_to("/feed.xml")[-1].headers["If-Modified-Since"] == stamp


async def test_server_error_is_a_source_error_without_query_secrets(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set("/feed.xml", "broken", "text/plain", status=500)
    url = server.url("/feed.xml?token=s3cret")
    with pytest.raises(base.SourceError, match="HTTP 500") as caught:
        await rss.fetch(rss_config(url), {}, client)
    assert server.url("/feed.xml") in str(caught.value)
    assert "s3cret" not in str(caught.value)


async def test_timeout_is_a_source_error(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set("/slow", "", hang=True)
    with pytest.raises(base.SourceError, match=r"timed out after 0\.3 s"):
        await rss.fetch(rss_config(server.url("/slow"), timeout_seconds=0.3), {}, client)


async def test_connection_refused_is_a_source_error(client: httpx.AsyncClient) -> None:
    with feed_server.FeedServer() as stopped:
        url = stopped.url("/feed.xml")
    with pytest.raises(base.SourceError, match="the connection was refused"):
        await rss.fetch(rss_config(url), {}, client)


async def test_malformed_xml_is_a_source_error(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set("/feed.xml", b"<rss><channel><title>cut off</title></chan", "application/xml")
    with pytest.raises(base.SourceError, match=r"feed .*/feed\.xml is malformed: .*unclosed token"):
        await rss.fetch(rss_config(server.url("/feed.xml")), {}, client)
    server.set("/page", b"<!DOCTYPE html><html><body>a web page</body></html>", "text/html")
    with pytest.raises(base.SourceError, match="malformed"):
        await rss.fetch(rss_config(server.url("/page")), {}, client)


async def test_feed_with_recoverable_errors_keeps_its_entries(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    # feedparser's lenient parser still finds the entry: bozo alone is not an error.
    server.set("/feed.xml", b"<rss><channel><item><title>unclosed", "application/xml")
    fetched = await rss.fetch(rss_config(server.url("/feed.xml")), {}, client)
    assert len(fetched.items) == 1


def test_rss_config_rejects_other_schemes_and_unknown_fields() -> None:
    with pytest.raises(pydantic.ValidationError, match="http:// or https://"):
        rss_config("ftp://example.org/feed")
    with pytest.raises(pydantic.ValidationError, match="extra"):
        rss_config("http://example.org/feed", interval=5)


def test_default_scope_hides_the_query() -> None:
    config = rss_config("https://example.org/feed?key=s3cret")
    assert config.scope.startswith("rss:https://example.org/feed#")
    assert "s3cret" not in config.scope
    assert rss_config("https://example.org/feed").scope == "rss:https://example.org/feed"
    assert rss_config("https://example.org/feed", scope="news").scope == "news"


def test_html_to_text() -> None:
    markup = "<h1>T</h1><p>a &amp; b<script>x()</script></p><ul><li>one</li><li>two</li></ul>"
    assert common.html_to_text(markup) == "T\n\na & b\n\none\n\ntwo"


# --- http_json ----------------------------------------------------------------------------


async def test_http_json_items_from_a_nested_path_with_env_header(
    server: feed_server.FeedServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_API_TOKEN", "Bearer t0ken")
    document = {
        "data": {
            "items": [
                {"id": 7, "subject": "Printer", "body": "It jams", "url": "http://x/7"},
                {"id": "b", "subject": "VPN", "body": {"lines": 2}},
            ]
        }
    }
    server.set_json("/api", document)
    config = json_config(
        server.url("/api"),
        headers={"Authorization": "env:TEST_API_TOKEN", "X-Plain": "yes"},
        items_path="data.items",
        title_field="subject",
        text_field="body",
        link_field="url",
    )
    fetched = await http_json.fetch(config, {}, client)
    first, second = fetched.items
    assert (first.source_id, first.title, first.text, first.link) == (
        "7",
        "Printer",
        "It jams",
        "http://x/7",
    )
    assert (second.source_id, second.text, second.link) == ("b", '{"lines": 2}', None)
    assert first.extra["item"]["subject"] == "Printer"
    sent = server.requests_to("/api")[-1].headers
    assert sent["Authorization"] == "Bearer t0ken"
    assert sent["X-Plain"] == "yes"


async def test_http_json_top_level_list(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set_json("/list", [{"id": 1, "title": "one", "text": "1"}])
    fetched = await http_json.fetch(json_config(server.url("/list")), {}, client)
    assert [item.source_id for item in fetched.items] == ["1"]


async def test_http_json_conditional_get(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set_json("/api", [{"id": 1}], etag='W/"7"')
    config = json_config(server.url("/api"))
    first = await http_json.fetch(config, {}, client)
    assert first.state == {"etag": 'W/"7"'}
    second = await http_json.fetch(config, first.state, client)
    assert (second.items, second.state) == ([], first.state)


async def test_http_json_non_ascii_header_value_is_a_source_error(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set_json("/api", [])
    config = json_config(server.url("/api"), headers={"X-Key": "schlüssel"})
    with pytest.raises(base.SourceError, match="header X-Key: value must be ASCII") as caught:
        await http_json.fetch(config, {}, client)
    assert "schlüssel" not in str(caught.value)
    assert server.requests_to("/api") == []


async def test_http_json_malformed_json(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set("/api", "{not json", "application/json")
    with pytest.raises(base.SourceError, match="did not answer valid JSON"):
        await http_json.fetch(json_config(server.url("/api")), {}, client)


async def test_http_json_missing_path(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set_json("/api", {"data": {"results": []}})
    config = json_config(server.url("/api"), items_path="data.items")
    with pytest.raises(base.SourceError, match=r"items_path 'data\.items' not found"):
        await http_json.fetch(config, {}, client)


async def test_http_json_path_not_a_list(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set_json("/api", {"data": {"items": {"id": 1}}})
    config = json_config(server.url("/api"), items_path="data.items")
    with pytest.raises(base.SourceError, match="is a dict, expected a list"):
        await http_json.fetch(config, {}, client)


async def test_http_json_item_without_id(
    server: feed_server.FeedServer, client: httpx.AsyncClient
) -> None:
    server.set_json("/api", [{"id": 1}, {"title": "no id"}])
    with pytest.raises(base.SourceError, match="item 1 has no id field 'id'"):
        await http_json.fetch(json_config(server.url("/api")), {}, client)


async def test_http_json_missing_env_header_names_the_variable_only(
    server: feed_server.FeedServer, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_MISSING_TOKEN", raising=False)
    server.set_json("/api", [])
    config = json_config(server.url("/api"), headers={"Authorization": "env:TEST_MISSING_TOKEN"})
    with pytest.raises(base.SourceError, match=r"header Authorization: .*TEST_MISSING_TOKEN"):
        await http_json.fetch(config, {}, client)
    assert server.requests_to("/api") == []


# --- folder -------------------------------------------------------------------------------


async def fetch_folder(root: Path) -> list[base.FetchedItem]:
    config = folder.Config(type="folder", path=root)
    async with httpx.AsyncClient() as unused:
        return (await folder.fetch(config, {}, unused)).items


async def test_folder_incremental_new_unchanged_changed(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.md").write_text("# Alpha\n\nfirst version\n")
    (tmp_path / "sub" / "b.md").write_text("no heading here\n")
    (tmp_path / "ignored.txt").write_text("not markdown")
    seen: set[str] = set()  # stands in for the dedup table

    def new_items(items: list[base.FetchedItem]) -> list[base.FetchedItem]:
        fresh = [item for item in items if item.source_id not in seen]
        seen.update(item.source_id for item in items)
        return fresh

    first = new_items(await fetch_folder(tmp_path))
    assert [(item.title, item.extra["path"]) for item in first] == [
        ("Alpha", "a.md"),
        ("b", "sub/b.md"),
    ]
    digest = hashlib.sha256(b"# Alpha\n\nfirst version\n").hexdigest()[:16]
    assert first[0].source_id == f"a.md@{digest}"
    assert first[0].text == "first version"

    assert new_items(await fetch_folder(tmp_path)) == []  # nothing changed

    (tmp_path / "a.md").write_text("# Alpha\n\nsecond version\n")
    (tmp_path / "c.md").write_text("# Gamma\n")
    changed = new_items(await fetch_folder(tmp_path))
    assert [(item.title, item.text) for item in changed] == [
        ("Alpha", "second version"),
        ("Gamma", ""),
    ]


async def test_folder_front_matter(tmp_path: Path) -> None:
    (tmp_path / "note.md").write_text(
        "---\ntitle: From YAML\ndate: 2024-05-01\ntags: [a, b]\n---\n# Heading\nBody\n"
    )
    [item] = await fetch_folder(tmp_path)
    assert item.extra["front_matter"] == {
        "title": "From YAML",
        "date": "2024-05-01",
        "tags": ["a", "b"],
    }
    assert item.title == "Heading"
    assert item.text == "Body"


async def test_folder_note_heading_is_the_title_once_and_markdown_becomes_text(
    tmp_path: Path,
) -> None:
    (tmp_path / "city.md").write_text(
        "# Council **votes** on trams\n\nThe council *voted* 7 to 2, see [the minutes]"
        "(https://example.org/m).\n\n## Next steps\n\n- a vote in May\n- `tram_line` costs\n"
    )
    [item] = await fetch_folder(tmp_path)
    assert item.title == "Council votes on trams"
    assert item.text == (
        "The council voted 7 to 2, see the minutes (https://example.org/m).\n\n"
        "Next steps\n\n• a vote in May\n• tram_line costs"
    )
    assert "#" not in item.text and "Council" not in item.text


def test_folder_pattern_must_be_a_file_glob(tmp_path: Path) -> None:
    for bad in ("", "../*.md", "sub/*.md"):
        with pytest.raises(pydantic.ValidationError, match="file-name glob"):
            folder.Config(type="folder", path=tmp_path, pattern=bad)


async def test_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(base.SourceError, match="does not exist"):
        await fetch_folder(tmp_path / "missing")
    (tmp_path / "bad.md").write_text("---\n[unclosed\n---\nbody\n")
    with pytest.raises(base.SourceError, match=r"bad\.md: front matter is not valid YAML"):
        await fetch_folder(tmp_path)
    (tmp_path / "bad.md").write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(base.SourceError, match=r"bad\.md is not valid UTF-8"):
        await fetch_folder(tmp_path)


# --- dispatch -----------------------------------------------------------------------------


async def test_dispatch_by_type(
    server: feed_server.FeedServer, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    adapter: pydantic.TypeAdapter[sources.SourceConfig] = pydantic.TypeAdapter(sources.SourceConfig)
    server.set("/feed.xml", RSS, "application/rss+xml")
    feed = adapter.validate_python({"type": "rss", "url": server.url("/feed.xml")})
    assert isinstance(feed, rss.Config)
    assert len((await sources.fetch(feed, {}, client)).items) == 3
    (tmp_path / "x.md").write_text("# X\n")
    notes = adapter.validate_python({"type": "folder", "path": str(tmp_path)})
    assert [item.title for item in (await sources.fetch(notes, {}, client)).items] == ["X"]
    with pytest.raises(pydantic.ValidationError, match="does not match any of the expected tags"):
        adapter.validate_python({"type": "ftp"})
