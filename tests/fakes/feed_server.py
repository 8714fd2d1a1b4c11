"""A small local HTTP server for feeds, JSON APIs and webhooks in tests.

    with FeedServer() as server:
        server.set("/feed.xml", RSS_BYTES, "application/rss+xml", etag='"v1"')
        server.set("/boom", "oops", status=500)
        server.set("/slow", "", hang=True)          # never answers until the server stops
        url = server.url("/feed.xml")               # http://127.0.0.1:<port>/feed.xml
        ...
        server.requests[-1].headers["If-None-Match"]

It runs `http.server.ThreadingHTTPServer` on 127.0.0.1 with an ephemeral port in a
daemon thread, so sync and async tests alike can use it. A route answers 304 when the
request's If-None-Match equals its ETag, or its If-Modified-Since is not older than
its Last-Modified. Unknown paths answer 404. Query strings are ignored when matching
routes but kept in the request log. POST bodies are logged too (for webhook fakes).
"""

from __future__ import annotations

import email.utils
import http.server
import json
import ssl
import sys
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Route:
    """What the server answers on one path."""

    body: bytes
    content_type: str
    status: int = 200
    etag: str | None = None
    last_modified: str | None = None
    hang: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Request:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (timed out, or was killed) is not the server's error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FeedServer:
    """A context manager serving configurable routes on 127.0.0.1; see the module docstring."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Request] = []
        self._routes: dict[str, Route] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        if tls is not None:  # HTTPS: the context's certificate (tests.fakes.tls) answers
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        # A short poll interval keeps shutdown (and so each test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> FeedServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()  # releases hanging handlers
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        """The absolute URL of `path` on this server."""
        return f"http://127.0.0.1:{self.port}{path}"

    def set(
        self,
        path: str,
        body: bytes | str,
        content_type: str = "application/xml",
        status: int = 200,
        *,
        etag: str | None = None,
        last_modified: str | None = None,
        hang: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Serve `body` on `path` (replacing what was there); see Route for the options."""
        data = body.encode() if isinstance(body, str) else body
        route = Route(data, content_type, status, etag, last_modified, hang, dict(headers or {}))
        with self._lock:
            self._routes[path] = route

    def set_json(self, path: str, document: Any, status: int = 200, **options: Any) -> None:
        """Serve `document` as JSON on `path`."""
        self.set(path, json.dumps(document), "application/json", status, **options)

    def requests_to(self, path: str) -> list[Request]:
        """The logged requests whose path (query ignored) is `path`."""
        with self._lock:
            return [r for r in self.requests if r.path.split("?", 1)[0] == path]

    def _record(self, request: Request) -> Route | None:
        with self._lock:
            self.requests.append(request)
            return self._routes.get(request.path.split("?", 1)[0])

    def _wait_until_stopped(self) -> None:
        self._stopping.wait()


def _not_modified(route: Route, headers: dict[str, str]) -> bool:
    if route.etag is not None and headers.get("If-None-Match") == route.etag:
        return True
    since = headers.get("If-Modified-Since")
    if route.last_modified is None or since is None:
        return False
    try:
        asked = email.utils.parsedate_to_datetime(since)
        changed = email.utils.parsedate_to_datetime(route.last_modified)
    except (TypeError, ValueError):
        return False
    return changed <= asked


def _handler_for(server: FeedServer) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave in one write (flushed after each request): written apart,
        # Nagle and the client's delayed ACK hold every answer back about 40 ms.
        wbufsize = -1

        def do_GET(self) -> None:
            self._answer(b"")

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self._answer(self.rfile.read(length))

        def _answer(self, body: bytes) -> None:
            headers = dict(self.headers.items())
            route = server._record(Request(self.command, self.path, headers, body))
            if route is None:
                self._send(404, b"not found", "text/plain", {})
            elif route.hang:
                server._wait_until_stopped()
                self.close_connection = True
            elif _not_modified(route, headers):
                self._send(304, b"", None, _validators(route))
            else:
                extra = _validators(route) | route.headers
                self._send(route.status, route.body, route.content_type, extra)

        def _send(
            self, status: int, body: bytes, content_type: str | None, headers: dict[str, str]
        ) -> None:
            self.send_response(status)
            if content_type:
                self.send_header("Content-Type", content_type)
            for name, value in headers.items():
                self.send_header(name, value)
            if status != 304:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if status != 304:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the request log is self.requests; stderr noise helps no one

    return Handler


def _validators(route: Route) -> dict[str, str]:
    headers = {}
    if route.etag is not None:
        headers["ETag"] = route.etag
    if route.last_modified is not None:
        headers["Last-Modified"] = route.last_modified
    return headers
