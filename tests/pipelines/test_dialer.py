"""One lookup per connection, and the connection goes to the address that lookup judged:
a local DNS server whose answer changes between lookups (DNS rebinding), a network that
records every address dialed and reaches nothing past loopback, real local sites."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from bot.cli import dry_run
from pipelines.ground import addresses, httpclient
from pipelines.service import runtime
from pipelines.sources import articles, rss
from store import db, outbox
from tests.fakes import network, site, tls
from tests.fakes.dns import DnsServer
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM
from tests.pipelines import test_full_text

BODY = "<p>" + "A sentence of the public article, long enough to count. " * 8 + "</p>"
PAGE = f"<html><body><article><h1>Story</h1>{BODY}</article></body></html>"
SECRET = "<html><body><article><p>" + "the intranet's secret " * 30 + "</p></article></body></html>"
#: Global addresses: the one that stands for the public site, and one nothing answers.
SITE, NOWHERE = network.PUBLIC, "93.184.215.15"


def strict() -> rss.Config:
    values = {"type": "rss", "url": "https://example.org/feed.xml", "timeout_seconds": 5}
    return rss.Config.model_validate(values)


@pytest.fixture
def intranet() -> Iterator[FeedServer]:
    """The loopback service a rebinding name tries to reach: it must receive nothing."""
    with FeedServer() as server:
        server.set("/secret", SECRET, "text/html")
        yield server


@pytest.fixture
def public() -> Iterator[FeedServer]:
    """The public site, reached only through the network's route for SITE."""
    with FeedServer() as server:
        server.set("/story", PAGE, "text/html")
        yield server


async def fetch(dns: DnsServer, net: network.Network, link: str) -> articles.Article:
    async with httpclient.fetching(resolve=dns.resolve, network=net) as client:
        return await articles.Fetcher(client).fetch(link, strict(), "ua")


async def test_a_rebinding_name_is_dialed_at_the_address_its_one_lookup_judged(
    intranet: FeedServer, public: FeedServer
) -> None:
    net = network.Network({SITE: public.port})
    with DnsServer({"rebind.test": [SITE, "127.0.0.1"]}) as dns:
        link = f"http://rebind.test:{intranet.port}/story"
        article = await fetch(dns, net, link)
    assert article.text is not None and "the public article" in article.text
    assert dns.queries == ["rebind.test"]
    assert net.dialed == [(SITE, intranet.port)]
    assert not intranet.requests
    [request] = public.requests
    assert request.headers["Host"] == f"rebind.test:{intranet.port}"  # the name, not the IP


async def test_a_rebinding_name_whose_public_answer_is_down_never_reaches_loopback(
    intranet: FeedServer,
) -> None:
    net = network.Network()
    with DnsServer({"rebind.test": [NOWHERE, "127.0.0.1"]}) as dns:
        article = await fetch(dns, net, f"http://rebind.test:{intranet.port}/secret")
    assert article.text is None and article.reason is not None
    assert "failed: ConnectError" in article.reason
    assert dns.queries == ["rebind.test"] and net.dialed == [(NOWHERE, intranet.port)]
    assert not intranet.requests


async def test_each_hop_of_a_redirect_is_dialed_where_its_own_lookup_said(
    intranet: FeedServer, public: FeedServer
) -> None:
    target = f"http://rebind.test:{intranet.port}/secret"
    public.set("/old", "", "text/html", status=302, headers={"Location": target})
    net = network.Network({SITE: public.port})
    answers = {"news.test": [SITE], "rebind.test": [NOWHERE, "127.0.0.1"]}
    with DnsServer(answers) as dns:
        article = await fetch(dns, net, "http://news.test/old")
    assert article.text is None and article.reason is not None
    assert "failed: ConnectError" in article.reason
    assert dns.queries == ["news.test", "rebind.test"]
    assert net.dialed == [(SITE, 80), (NOWHERE, intranet.port)]
    assert [r.path for r in public.requests] == ["/old"] and not intranet.requests


async def test_a_redirect_to_a_name_that_answers_loopback_is_refused_before_dialing(
    intranet: FeedServer, public: FeedServer
) -> None:
    target = f"http://inward.test:{intranet.port}/secret"
    public.set("/old", "", "text/html", status=302, headers={"Location": target})
    net = network.Network({SITE: public.port})
    with DnsServer({"news.test": [SITE], "inward.test": ["127.0.0.1"]}) as dns:
        article = await fetch(dns, net, "http://news.test/old")
    assert article.reason is not None
    assert "inward.test resolves to a private address (127.0.0.1)" in article.reason
    assert net.dialed == [(SITE, 80)] and not intranet.requests


async def test_a_source_that_allows_private_addresses_still_dials_its_one_answer(
    intranet: FeedServer,
) -> None:
    net = network.Network()
    with DnsServer({"intranet.test": ["127.0.0.1", NOWHERE]}) as dns:
        async with httpclient.fetching(resolve=dns.resolve, network=net) as client:
            allowed = strict().model_copy(update={"allow_private_addresses": True})
            link = f"http://intranet.test:{intranet.port}/secret"
            article = await articles.Fetcher(client).fetch(link, allowed, "ua")
    assert article.text is not None and "secret" in article.text
    assert dns.queries == ["intranet.test"] and net.dialed == [("127.0.0.1", intranet.port)]


EMBEDDED = [
    ("::127.0.0.1", True),  # IPv4-compatible
    ("::8.8.8.8", False),
    ("64:ff9b::7f00:1", True),  # NAT64, well-known prefix
    ("64:ff9b::a9fe:a9fe", True),  # NAT64 of 169.254.169.254
    ("64:ff9b::808:808", False),
    ("64:ff9b:1::a00:1", True),  # NAT64, local-use prefix: 10.0.0.1
    ("2002:7f00:1::", True),  # 6to4 of 127.0.0.1
    ("2002:c0a8:101::1", True),  # 6to4 of 192.168.1.1
    ("2002:808:808::1", False),
    ("::ffff:127.0.0.1", True),  # IPv4-mapped
    ("::ffff:8.8.8.8", False),
    ("2606:4700::1111", False),
    ("::1", True),
    ("fe80::1", True),
]


@pytest.mark.parametrize(("text", "private"), EMBEDDED)
def test_an_ipv6_address_is_judged_by_the_ipv4_address_it_embeds(text: str, private: bool) -> None:
    assert addresses.private(ipaddress.ip_address(text)) is private


@pytest.mark.parametrize("text", [t for t, private in EMBEDDED if private])
async def test_a_link_to_an_ipv6_form_of_a_private_address_is_refused(text: str) -> None:
    net = network.Network()
    async with httpclient.fetching(resolve=network.resolve, network=net) as client:
        article = await articles.Fetcher(client).fetch(f"http://[{text}]:9/x", strict(), "ua")
    assert article.reason is not None and "resolves to a private address" in article.reason
    assert not net.dialed


def rebinding_feed(news: FeedServer, intranet: FeedServer) -> str:
    """Two entries: one links to a rebinding name, one to a public page that redirects
    to another (each name is asked once, so each gets its public answer)."""
    links = {
        "direct": f"http://rebind-one.test:{intranet.port}/secret",
        "redirected": "http://news.test/old",
    }
    entries = "".join(
        f"<item><guid>{guid}</guid><title>Story {guid}</title><link>{link}</link>"
        f"<description>The teaser of {guid}.</description></item>"
        for guid, link in links.items()
    )
    return (
        '<?xml version="1.0"?><rss version="2.0"><channel><title>t</title>'
        f"<link>{news.url('/')}</link><description>d</description>{entries}</channel></rss>"
    )


async def test_a_rebinding_link_drafts_from_the_teaser_and_the_card_says_why(
    store: db.Store, intranet: FeedServer, public: FeedServer, tmp_path: Path, now: datetime
) -> None:
    """The engine end to end: the feed on loopback (the operator's own URL), its links on
    names that answer public then 127.0.0.1, directly and through a redirect."""
    target = f"http://rebind-two.test:{intranet.port}/secret"
    public.set("/old", "", "text/html", status=302, headers={"Location": target})
    public.set("/feed.xml", rebinding_feed(public, intranet), "application/rss+xml")
    pipeline = test_full_text.write_pipeline(tmp_path, public.url("/feed.xml"), private=False)
    answers = {name: [NOWHERE, "127.0.0.1"] for name in ("rebind-one.test", "rebind-two.test")}
    net = network.Network({SITE: public.port})
    with DnsServer(answers | {"news.test": [SITE]}) as dns, FakeLLM() as llm:
        llm.queue_reply("A post.")
        llm.queue_reply("A post.")
        async with httpclient.fetching(resolve=dns.resolve, network=net) as client:
            drafted = await test_full_text.draft_all(store, pipeline, client, llm, now)
        prompts = " ".join(str(r.body["messages"][-1]["content"]) for r in llm.requests)
    assert sorted(drafted) == ["direct", "redirected"] and not intranet.requests
    assert sorted(dns.queries) == ["news.test", "rebind-one.test", "rebind-two.test"]
    assert "secret" not in prompts and "The teaser of direct." in prompts
    cards = {row.item_id: row.payload for row in await outbox.due(store, now, ["card"])}
    for guid, name in (("direct", "rebind-one.test"), ("redirected", "rebind-two.test")):
        note = cards[drafted[guid].id]["note"]
        assert f"GET http://{name}:{intranet.port}/secret failed: ConnectError" in note, note
        assert note.endswith("drafted from the feed's teaser")


async def test_the_bot_and_the_dry_run_fetch_with_the_client_that_judges_addresses(
    news_site: FeedServer, tmp_path: Path, now: datetime
) -> None:
    """A strict source's loopback link is refused for its address, by the client each
    command builds itself (not turned away for want of that client)."""
    (tmp_path / "pipelines").mkdir()
    pipeline = test_full_text.write_pipeline(tmp_path, news_site.url("/feed.xml"), private=False)
    report = await dry_run._run(pipeline, now, None, 5)
    [note] = [payload["note"] for _, payload in report.cards]
    assert "resolves to a private address (127.0.0.1)" in note
    assert not news_site.requests_to(site.page_path("good"))
    cfg = runtime.RuntimeConfig(
        store=db.StoreConfig(data_dir=tmp_path / "data"), pipelines_dir=tmp_path / "pipelines"
    )
    started = await runtime.Runtime.start(cfg)
    try:
        assert isinstance(started.client, httpclient.Fetching)
    finally:
        await started.stop()


@pytest.fixture
def news_site() -> Iterator[FeedServer]:
    with FeedServer() as server:
        site.serve(server, [test_full_text.GOOD])
        yield server


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tls.Made]:
    """A CA the shared TLS context trusts (SSL_CERT_FILE), and a certificate for secure.test."""
    made = tls.Made.for_names(tmp_path, ["secure.test"])
    monkeypatch.setenv("SSL_CERT_FILE", str(made.ca_file))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    httpclient._made.cache_clear()
    yield made
    httpclient._made.cache_clear()


async def test_an_https_link_dialed_at_its_address_is_verified_for_its_name(
    made: tls.Made,
) -> None:
    """The connection goes to the judged IP, but TLS asks for the link's name (SNI) and
    checks the certificate against it: a name the certificate does not hold is refused."""
    with FeedServer(tls=made.server) as secure:
        secure.set("/story", PAGE, "text/html")
        net = network.Network({SITE: secure.port})
        with DnsServer({"secure.test": [SITE], "other.test": [SITE]}) as dns:
            article = await fetch(dns, net, "https://secure.test/story")
            assert article.text is not None and "the public article" in article.text
            wrong = await fetch(dns, net, "https://other.test/story")
    assert made.asked == ["secure.test", "other.test"]
    assert net.dialed == [(SITE, 443), (SITE, 443)]
    assert wrong.text is None
    assert (
        wrong.reason
        == "GET https://other.test/story failed: TLS failed (CERTIFICATE_VERIFY_FAILED)"
    )
    [request] = secure.requests  # the one whose certificate matched
    assert request.headers["Host"] == "secure.test"


async def test_a_connection_a_lenient_source_opened_is_never_lent_to_a_strict_fetch(
    intranet: FeedServer,
) -> None:
    """Kept-alive connections live in one pool per rule: the strict fetch of the same
    intranet link looks the name up itself and is refused, without reusing the socket."""
    net = network.Network()
    link = f"http://intranet.test:{intranet.port}/secret"
    with DnsServer({"intranet.test": ["127.0.0.1"]}) as dns:
        async with httpclient.fetching(resolve=dns.resolve, network=net) as client:
            fetcher = articles.Fetcher(client)
            lenient = strict().model_copy(update={"allow_private_addresses": True})
            assert (await fetcher.fetch(link, lenient, "ua")).text is not None
            refused = await fetcher.fetch(link, strict(), "ua")
            assert (await fetcher.fetch(link, lenient, "ua")).text is not None
    assert refused.reason is not None and "private address (127.0.0.1)" in refused.reason
    assert dns.queries == ["intranet.test", "intranet.test"]  # the third reused the first's
    assert net.dialed == [("127.0.0.1", intranet.port)] and len(intranet.requests) == 2
