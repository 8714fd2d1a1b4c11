"""A local webhook receiver over real sockets, for dispatch tests.

    with WebhookServer() as server:
        server.script(Reply(500), Reply(200, body=b'{"id": "abc"}'))
        ...POST to server.url...
        server.requests[0].headers["idempotency-key"]

Each request is recorded (method, path, headers, body) before it is answered.
Replies are taken from the script in order; once it runs out, every request
gets 200 with `{"id": "<n>"}`. `observe`, when set, is called from the server thread
with each request once it is recorded and before it is answered (the crash bench kills
the sender there). A reply with `delay` waits that long before
answering (to trip a client timeout); a `held` reply waits until `release()`, so a test
can look at the world while a call hangs; closing the server cuts either wait short.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering.
    delay: float = 0.0
    #: Answer only once the test calls WebhookServer.release().
    held: bool = False


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real webhook receivers do
    disable_nagle_algorithm = True  # else each keep-alive reply stalls ~40 ms
    server: _Server

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = Recorded("POST", self.path, headers, body)
        reply = self.server.owner.record(request)
        if self.server.owner.observe is not None:
            self.server.owner.observe(request)
        if reply.delay and self.server.owner.closing.wait(reply.delay):
            return
        if reply.held:
            self.server.owner.released.wait()
            if self.server.owner.closing.is_set():
                return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `requests` instead."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, owner: WebhookServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout test) resets the connection: not an error here."""


class WebhookServer:
    """A webhook endpoint on an ephemeral loopback port; use it as a context manager."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.observe: Callable[[Recorded], None] | None = None
        self.closing = threading.Event()
        self.released = threading.Event()
        self._script: list[Reply] = []
        self._lock = threading.Lock()
        self._server = _Server(self)
        # A short poll interval keeps shutdown (and so each test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, in order."""
        with self._lock:
            self._script.extend(replies)

    def release(self) -> None:
        """Let every held reply (and any later one) answer."""
        self.released.set()

    def record(self, request: Recorded) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.pop(0)
            body = json.dumps({"id": str(len(self.requests))}).encode()
            return Reply(200, body, {"Content-Type": "application/json"})

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.closing.set()
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
