"""Helpers the sources share: plain text from HTML, `env:` secrets, HTTP GET with clear errors."""

from __future__ import annotations

import hashlib
import html.parser
import os
import re
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipelines.sources import base

if TYPE_CHECKING:
    import httpx

#: Prefix meaning "read this value from the named environment variable at fetch time".
ENV_PREFIX = "env:"

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


def conditional_headers(state: Mapping[str, str]) -> dict[str, str]:
    """If-None-Match / If-Modified-Since from the validators kept after the last fetch."""
    headers = {}
    if etag := state.get("etag"):
        headers["If-None-Match"] = etag
    if last_modified := state.get("last_modified"):
        headers["If-Modified-Since"] = last_modified
    return headers


def validators(response: httpx.Response) -> dict[str, str]:
    """The ETag / Last-Modified the server sent, as the state for the next conditional GET."""
    state = {}
    if etag := response.headers.get("etag"):
        state["etag"] = etag
    if last_modified := response.headers.get("last-modified"):
        state["last_modified"] = last_modified
    return state


async def get(
    client: httpx.AsyncClient, url: str, headers: Mapping[str, str], seconds: float
) -> httpx.Response:
    """GET `url`; a 304 is returned, every other failure becomes a SourceError naming the URL.

    Messages carry the redacted URL and the status only, never header values.
    """
    import httpx  # loaded by the engine's first fetch, so the CLI starts without it

    shown = redact_url(url)
    try:
        response = await client.get(url, headers=dict(headers), timeout=seconds)
    except httpx.TimeoutException:
        raise base.SourceError(f"GET {shown} timed out after {seconds:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
        # ValueError: e.g. a header value that is not ASCII, refused before anything is sent.
        # The exception's text may repeat the full URL; its class name is enough to act on.
        raise base.SourceError(f"GET {shown} failed: {type(exc).__name__}") from None
    if response.status_code >= 400:
        raise base.SourceError(
            f"GET {shown} answered HTTP {response.status_code} {response.reason_phrase}".rstrip()
        )
    return response
