"""Bounded input from sources: byte caps on the wire and decompressed, item caps at load.

Real sockets to the local feed server, a real store, the real engine: a hostile source
fails alone, the others still deliver, and the process's peak memory stays bounded.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from pipelines import sources
from pipelines.config import spec
from pipelines.runs import engine
from pipelines.sources import base, common, rss
from store import db, items
from store.intake import runs
from store.items.machine import State
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss as rss_document

MiB = 1024 * 1024

PIPELINE = """
name: mixed
schedule: 5m
sources:
  - {{type: rss, url: "{bomb}", scope: bomb}}
  - {{type: rss, url: "{huge_rss}", scope: huge-rss}}
  - {{type: http_json, url: "{huge_json}", scope: huge-json}}
  - {{type: rss, url: "{good}", scope: good}}
dispatch:
  type: none
"""


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


def gzip_of_zeros(size: int) -> bytes:
    """`size` zero bytes gzipped, built a MiB at a time (the test never holds them all)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(MiB)
    parts = [packer.compress(block) for _ in range(size // MiB)]
    return b"".join([*parts, packer.flush()])


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} missing from /proc/self/status")


def reset_peak_rss() -> int:
    """Reset the kernel's peak-RSS mark (VmHWM) and return the RSS now, in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS") * 1024


def peak_rss() -> int:
    return _status_kib("VmHWM") * 1024


async def test_a_gzip_bomb_and_50_mb_items_fail_their_sources_alone_in_bounded_memory(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    bomb = gzip_of_zeros(300 * MiB)
    assert len(bomb) < MiB  # 300 MB of zeros travel as about 300 KB
    feeds.set("/bomb.xml", bomb, "application/rss+xml", headers={"Content-Encoding": "gzip"})
    feeds.set("/huge.xml", rss_document([("h1", "Huge", "x" * (50 * MiB))]))
    feeds.set_json("/huge.json", [{"id": "j1", "title": "Huge", "text": "y" * (50 * MiB)}])
    feeds.set("/good.xml", rss_document([("g1", "Good", "still delivered")]))
    urls = {
        "bomb": feeds.url("/bomb.xml"),
        "huge_rss": feeds.url("/huge.xml"),
        "huge_json": feeds.url("/huge.json"),
        "good": feeds.url("/good.xml"),
    }
    (tmp_path / "mixed.yaml").write_text(PIPELINE.format(**urls))
    loaded = spec.load_dir(tmp_path)
    assert loaded.errors == []
    eng = engine.Engine(store, loaded.pipelines, client=client)

    before = reset_peak_rss()
    report = await eng.tick("mixed", "manual", now)
    growth = peak_rss() - before

    assert growth < 100 * MiB, f"peak memory grew by {growth / MiB:.0f} MiB"
    assert report.counts.new == 1
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "mixed")
    assert [i.source_id for i in waiting] == ["g1"]
    assert len(report.errors) == 3
    bomb_error, rss_error, json_error = report.errors
    assert bomb_error.startswith("source bomb: GET ") and (
        f"larger than max_decompressed_bytes ({10 * MiB} bytes)" in bomb_error
    )
    assert (
        rss_error.startswith("source huge-rss: ") and f"max_bytes ({10 * MiB} bytes)" in rss_error
    )
    assert json_error.startswith("source huge-json: ") and "max_bytes" in json_error
    run = (await runs.recent_runs(store, "mixed"))[0]
    assert run.status == "error" and run.error_text is not None and "bomb" in run.error_text


async def test_per_source_caps_override_the_defaults(
    feeds: FeedServer, client: httpx.AsyncClient
) -> None:
    feeds.set("/feed.xml", rss_document([("a", "A", "z" * 5000)]))
    small = rss.Config(type="rss", url=feeds.url("/feed.xml"), max_bytes=1000)
    with pytest.raises(base.SourceError, match=r"larger than max_bytes \(1000 bytes\)"):
        await sources.fetch(small, {}, client)
    # The global default comes from the settings through the loading context.
    context = {common.LIMITS_CONTEXT: common.Limits(max_bytes=2000)}
    globally = rss.Config.model_validate(
        {"type": "rss", "url": feeds.url("/feed.xml")}, context=context
    )
    assert (globally.max_bytes, globally.max_decompressed_bytes) == (2000, 10 * MiB)
    with pytest.raises(base.SourceError, match=r"larger than max_bytes \(2000 bytes\)"):
        await sources.fetch(globally, {}, client)
    roomy = rss.Config(type="rss", url=feeds.url("/feed.xml"), max_bytes=10_000)
    assert [i.source_id for i in (await sources.fetch(roomy, {}, client)).items] == ["a"]


async def test_a_gzipped_feed_within_its_caps_is_read(
    feeds: FeedServer, client: httpx.AsyncClient
) -> None:
    document = rss_document([("z1", "Zipped", "inflated once")]).encode()
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zipped = packer.compress(document) + packer.flush()
    feeds.set("/zipped.xml", zipped, headers={"Content-Encoding": "gzip"})
    config_ = rss.Config(type="rss", url=feeds.url("/zipped.xml"))
    fetched = await sources.fetch(config_, {}, client)
    assert [(i.title, i.text) for i in fetched.items] == [("Zipped", "inflated once")]
    assert feeds.requests_to("/zipped.xml")[0].headers["Accept-Encoding"] == "gzip, deflate"
    tight = rss.Config(
        type="rss", url=feeds.url("/zipped.xml"), max_decompressed_bytes=len(document) - 1
    )
    with pytest.raises(base.SourceError, match="larger than max_decompressed_bytes"):
        await sources.fetch(tight, {}, client)
    feeds.set("/odd.xml", document, headers={"Content-Encoding": "br"})
    odd = rss.Config(type="rss", url=feeds.url("/odd.xml"))
    with pytest.raises(base.SourceError, match="unsupported Content-Encoding 'br'"):
        await sources.fetch(odd, {}, client)


async def test_titles_and_texts_are_capped_and_cleaned_at_load(
    feeds: FeedServer, client: httpx.AsyncClient
) -> None:
    long_title = "T" * 5000
    feeds.set("/long.xml", rss_document([("l1", long_title, "w " * 2_000_000)]))
    feeds.set_json("/long.json", [{"id": 7, "title": "J", "text": "v" * 3_000_000}])
    fetched = await sources.fetch(rss.Config(type="rss", url=feeds.url("/long.xml")), {}, client)
    item = fetched.items[0]
    assert len(item.title) == sources.MAX_TITLE_CHARS and item.title.endswith(" […]")
    assert len(item.text) <= sources.MAX_TEXT_CHARS and item.text.endswith(" […]")
    json_source = sources.http_json.Config(type="http_json", url=feeds.url("/long.json"))
    element = (await sources.fetch(json_source, {}, client)).items[0]
    assert len(element.text) == sources.MAX_TEXT_CHARS
    assert "item" not in element.extra and "item_omitted" in element.extra


async def test_titles_are_unescaped_once_and_invisible_characters_go_from_both(
    feeds: FeedServer, client: httpx.AsyncClient
) -> None:
    # The same headline, escaped as a plain-text title and as an HTML one.
    document = (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
        "<item><guid>p</guid><title>AT&amp;T cuts prices &lt;again&gt;</title>"
        "<description>plain</description></item>"
        "<item><guid>h</guid><title>AT&amp;amp;T cuts prices &amp;lt;again&amp;gt;</title>"
        "<description>html</description></item>"
        "<item><guid>z</guid><title>Zero\u200bwidth</title>"
        "<description>Zero\u200bwidth body\ufeff</description></item>"
        "</channel></rss>"
    )
    feeds.set("/titles.xml", document)
    fetched = await sources.fetch(rss.Config(type="rss", url=feeds.url("/titles.xml")), {}, client)
    titles = {i.source_id: i.title for i in fetched.items}
    assert titles["p"] == "AT&T cuts prices <again>"
    assert titles["h"] == "AT&T cuts prices <again>"
    zero = next(i for i in fetched.items if i.source_id == "z")
    assert (zero.title, zero.text) == ("Zerowidth", "Zerowidth body")


def test_settings_carry_the_global_caps_into_pipeline_loading(tmp_path: Path) -> None:
    from bot import settings

    cfg = settings.load(sources={"max_bytes": 1234, "max_decompressed_bytes": 5678})
    (tmp_path / "p.yaml").write_text(
        "name: p\nschedule: manual\nsources:\n  - {type: rss, url: 'http://127.0.0.1:9/f',"
        " max_decompressed_bytes: 99}\ndispatch: {type: none}\n"
    )
    loaded = spec.load_dir(tmp_path, settings.pipeline_context(cfg))
    source = loaded.pipelines["p"].sources[0]
    assert isinstance(source, rss.Config)
    assert (source.max_bytes, source.max_decompressed_bytes) == (1234, 99)
    assert json.loads(json.dumps(source.model_dump(mode="json")))["max_bytes"] == 1234
    # The settings' defaults are the sources' own.
    defaults = settings.SourceSettings()
    assert (defaults.max_bytes, defaults.max_decompressed_bytes) == (
        common.DEFAULT_MAX_BYTES,
        common.DEFAULT_MAX_DECOMPRESSED_BYTES,
    )
