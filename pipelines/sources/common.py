"""Helpers the sources share: plain text from HTML, `env:` secrets, HTTP GET with clear errors.

`get` streams the answer and stops at a source's byte caps, on the wire and decompressed
(a 300 KB gzip bomb would otherwise become 300 MB in memory): `max_bytes` and
`max_decompressed_bytes` on a source, with defaults from the settings
(`GATEHOUSE_SOURCES__MAX_BYTES`, `GATEHOUSE_SOURCES__MAX_DECOMPRESSED_BYTES`).
"""

from __future__ import annotations

import asyncio
import hashlib
import html.parser
import os
import re
import urllib.parse
import zlib
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from pipelines.sources import base
from pipelines.text import redaction

if TYPE_CHECKING:
    import httpx

#: Prefix meaning "read this value from the named environment variable at fetch time".
ENV_PREFIX = "env:"
#: Default cap on an answer as it travels (bytes): a feed or a JSON page is rarely 1 MB.
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
#: Default cap on an answer once decompressed (bytes); gzip alone can inflate 1000-fold.
#: Parsing costs several times the size (feedparser: about 6x), so it stays at 10 MiB.
DEFAULT_MAX_DECOMPRESSED_BYTES = 10 * 1024 * 1024
#: The only encodings asked for and decoded: each is inflated here, a chunk at a time.
ACCEPT_ENCODING = "gzip, deflate"

# Tags after which a reader expects a line break; everything else flows inline.
_BLOCK_TAGS = frozenset(
    {"p", "div", "br", "li", "ul", "ol", "tr", "table", "blockquote", "pre", "hr"}
    | {"h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "header", "footer"}
)
_SKIPPED_TAGS = frozenset({"script", "style", "head", "title"})


class _TextExtractor(html.parser.HTMLParser):
    """Collects the visible text of an HTML fragment, one line per block element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping = max(0, self._skipping - 1)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_to_text(markup: str) -> str:
    """The readable text of an HTML fragment: tags dropped, entities decoded, blank runs folded."""
    extractor = _TextExtractor()
    extractor.feed(markup)
    extractor.close()
    raw_lines = "".join(extractor.parts).split("\n")
    lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in raw_lines)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def resolve(value: str, what: str) -> str:
    """`value` itself, or for `env:NAME` the variable NAME; `what` names the setting in errors."""
    if not value.startswith(ENV_PREFIX):
        return value
    name = value.removeprefix(ENV_PREFIX)
    resolved = os.environ.get(name)
    if resolved is None:
        raise base.SourceError(f"{what}: environment variable {name} is not set")
    redaction.remember(resolved)  # kept in the environment: a secret, never logged
    return resolved


def redact_url(url: str) -> str:
    """The URL without user info or query string, which may hold credentials."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    query = "?..." if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) + query


def default_scope(kind: str, url: str) -> str:
    """A dedup scope naming the URL without leaking what `redact_url` hides.

    Scopes are stored, so a URL's query or user info (maybe a token) is replaced by a
    short hash of the whole URL, which keeps two queries on one endpoint apart.
    """
    shown = redact_url(url)
    if shown == url:
        return f"{kind}:{url}"
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return f"{kind}:{shown.removesuffix('?...')}#{digest}"


def check_http_url(url: str) -> str:
    """Pydantic validator body: only http(s) URLs are fetched."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL")
    return url


@dataclass(frozen=True)
class Limits:
    """Byte caps on one source's answer; the settings give the defaults for every source."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES


#: The key under which pipeline loading passes the configured defaults to the models.
LIMITS_CONTEXT = "source_limits"


class ByteLimits(BaseModel):
    """A source with byte caps on its answer (a file, for a folder): it declares the fields
    `max_bytes` and `max_decompressed_bytes` (declared after its own fields, so error
    messages list those first, except where a WebSource declares them), and any left
    unset takes the configured default."""

    @model_validator(mode="after")
    def _default_limits(self, info: ValidationInfo) -> Any:
        context = info.context if isinstance(info.context, dict) else {}
        defaults = context.get(LIMITS_CONTEXT)
        if not isinstance(defaults, Limits):
            defaults = Limits()
        for name in ("max_bytes", "max_decompressed_bytes"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(defaults, name))
        return self

    @property
    def limits(self) -> Limits:
        return Limits(
            getattr(self, "max_bytes", None) or DEFAULT_MAX_BYTES,
            getattr(self, "max_decompressed_bytes", None) or DEFAULT_MAX_DECOMPRESSED_BYTES,
        )


class WebSource(ByteLimits):
    """A source fetched from an http(s) URL (rss, http_json): what every such source
    takes. A source's own fields follow these; its `type` keeps the first place."""

    model_config = ConfigDict(extra="forbid")

    type: str
    url: str
    #: Dedup scope; defaults to "<type>:<url>" (a query is replaced by a hash of the URL).
    scope: str = ""
    timeout_seconds: float = Field(default=30.0, gt=0)
    #: Draft from the linked article (sources.articles) instead of the feed's teaser.
    full_text: bool = False
    #: Fetch article links whose host resolves to a private address (an intranet site).
    allow_private_addresses: bool = False
    #: Largest answer accepted as sent (compressed), in bytes; unset: the configured default.
    max_bytes: int | None = Field(default=None, ge=1)
    #: Largest answer accepted once decompressed, in bytes; unset: the configured default.
    max_decompressed_bytes: int | None = Field(default=None, ge=1)

    _check_url = field_validator("url")(check_http_url)

    @model_validator(mode="after")
    def _default_scope(self) -> Self:
        if not self.scope:
            self.scope = default_scope(self.type, self.url)
        return self


@dataclass(frozen=True)
class Response:
    """A fetched answer, read whole within its source's caps."""

    status_code: int
    headers: httpx.Headers
    content: bytes


def conditional_headers(state: Mapping[str, str]) -> dict[str, str]:
    """If-None-Match / If-Modified-Since from the validators kept after the last fetch."""
    headers = {}
    if etag := state.get("etag"):
        headers["If-None-Match"] = etag
    if last_modified := state.get("last_modified"):
        headers["If-Modified-Since"] = last_modified
    return headers


def validators(response: Response) -> dict[str, str]:
    """The ETag / Last-Modified the server sent, as the state for the next conditional GET."""
    state = {}
    if etag := response.headers.get("etag"):
        state["etag"] = etag
    if last_modified := response.headers.get("last-modified"):
        state["last_modified"] = last_modified
    return state


class Bounded(Protocol):
    """What bounds a source's GET: its timeout and its byte limits (a WebSource has both)."""

    timeout_seconds: float

    @property
    def limits(self) -> Limits: ...


async def get(
    client: httpx.AsyncClient,
    url: str,
    headers: Mapping[str, str],
    source: Bounded,
    *,
    public_only: bool = False,
) -> Response:
    """GET `url` within the source's timeout and limits; a 304 is returned, every other
    failure becomes a SourceError naming the URL. With `public_only`, a host that resolves
    to a private address is refused at the connection (dialer), before anything is sent.

    Messages carry the redacted URL and the status only, never header values.
    """
    import httpx  # loaded by the engine's first fetch, so the CLI starts without it

    from pipelines.ground import dialer, httpclient

    shown, seconds = redact_url(url), source.timeout_seconds
    if public_only and not isinstance(client, httpclient.Fetching):
        # Only that client judges the address it dials: any other would fetch unchecked.
        raise base.SourceError(f"GET {shown} needs httpclient.fetching() to check addresses")
    asked = dict(headers) | {"Accept-Encoding": ACCEPT_ENCODING}
    marks = dialer.PUBLIC_ONLY if public_only else {}
    try:
        async with asyncio.timeout(seconds):
            stream = client.stream("GET", url, headers=asked, timeout=seconds, extensions=marks)
            return await _read(stream, source.limits, shown)
    except (TimeoutError, httpx.TimeoutException):
        raise base.SourceError(f"GET {shown} timed out after {seconds:g} s") from None
    except httpx.ConnectError as exc:
        if isinstance(exc.__cause__, dialer.Refused):  # its words name the host, not the URL
            raise base.SourceError(str(exc.__cause__)) from None
        why = httpclient.why_unreachable(exc)
        raise base.SourceError(f"GET {shown} failed: {why}") from None
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        # ValueError: e.g. a header value that is not ASCII, refused before anything is sent.
        # The exception's text may repeat the full URL; its class name is enough to act on.
        raise base.SourceError(f"GET {shown} failed: {type(exc).__name__}") from None


async def _read(
    stream: AbstractAsyncContextManager[httpx.Response], limits: Limits, shown: str
) -> Response:
    async with stream as response:
        if response.status_code >= 400:
            status = f"{response.status_code} {response.reason_phrase}".rstrip()
            raise base.SourceError(f"GET {shown} answered HTTP {status}")
        content = await read_bounded(response, limits, f"GET {shown}")
        return Response(response.status_code, response.headers, content)


class TooLarge(base.SourceError):
    """An answer larger than its byte cap: not read further."""

    def __init__(self, shown: str, setting: str, limit: int) -> None:
        super().__init__(
            f"{shown}: the answer is larger than {setting} ({limit} bytes); raise {setting}"
            " on this source if it is expected"
        )
        self.setting = setting
        self.limit = limit


async def read_bounded(response: httpx.Response, limits: Limits, shown: str) -> bytes:
    """A streamed answer's body, decoded, within `limits` on the wire and decompressed
    (TooLarge past either, a SourceError for an encoding it cannot decode). `shown` names
    the request in messages ("GET https://..."). The request must have asked for the
    encodings this reads: ACCEPT_ENCODING."""
    declared = response.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limits.max_bytes:
        raise TooLarge(shown, "max_bytes", limits.max_bytes)
    body = _Body(response.headers.get("content-encoding", ""), shown, limits)
    async for chunk in response.aiter_raw():
        if response.num_bytes_downloaded > limits.max_bytes:
            raise TooLarge(shown, "max_bytes", limits.max_bytes)
        body.feed(chunk)
    return body.finish()


class _Body:
    """An answer decoded a chunk at a time, never holding more than its cap plus one byte."""

    def __init__(self, encoding: str, shown: str, limits: Limits) -> None:
        self.name = encoding.strip().lower()
        self.shown = shown
        self.cap = limits.max_decompressed_bytes
        self.data = bytearray()
        self.decoder: Any = None
        if self.name in ("gzip", "x-gzip", "deflate"):
            # 32 + MAX_WBITS reads a gzip or a zlib header; bare deflate is retried in feed.
            self.decoder = zlib.decompressobj(32 + zlib.MAX_WBITS)
        elif self.name not in ("", "identity"):
            raise base.SourceError(
                f"{shown}: unsupported Content-Encoding {encoding!r}; valid: gzip, deflate"
            )

    def feed(self, chunk: bytes) -> None:
        if self.decoder is None:
            self._keep(chunk)
            return
        try:
            out = self.decoder.decompress(chunk, self._room())
        except zlib.error:
            if self.name != "deflate" or self.data:
                raise base.SourceError(f"{self.shown}: the {self.name} body is corrupt") from None
            self.decoder = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self.decoder.decompress(chunk, self._room())
        self._keep(out)
        # Asked for at most the room left plus one: whatever stays compressed waits here.
        while self.decoder.unconsumed_tail:
            self._keep(self.decoder.decompress(self.decoder.unconsumed_tail, self._room()))

    def finish(self) -> bytes:
        if self.decoder is not None:
            self._keep(self.decoder.flush())
        return bytes(self.data)

    def _room(self) -> int:
        return self.cap - len(self.data) + 1

    def _keep(self, out: bytes) -> None:
        if len(self.data) + len(out) > self.cap:
            raise TooLarge(self.shown, "max_decompressed_bytes", self.cap)
        self.data += out
