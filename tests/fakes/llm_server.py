"""A fake LLM provider over real sockets, speaking OpenAI chat completions and Anthropic messages.

Use it like this:

    with FakeLLM() as llm:                       # or FakeLLM(kind="anthropic")
        llm.queue_fault("429", retry_after=1)    # the next call gets a 429
        llm.queue_reply('{"title": "x"}')        # the call after that gets this text
        settings = ProviderSettings(kind="openai", base_url=llm.base_url, ...)
        ...
        assert llm.calls == 2 and llm.requests[0].headers["authorization"] == "Bearer k"

`observe`, when set, is called from the server thread with ("request", request) after a
request is recorded and before it is answered, and with ("answered", request) once a
200 reply is written: the crash bench kills the bot at those moments.

Routes: POST /v1/chat/completions (also /chat/completions), POST /v1/messages and
GET /v1/models (a key check, neither recorded nor counted as a call); the reply
shape follows the route, so one server serves both kinds (bodies built as the
demo's own LLM builds them, `bot.demo.llm`). Without a script the reply
is "DRAFT: " plus the first 60 characters of the user message, with usage and an id.
Faults, one per call, in queue order: any status code ("429", "500", "401", "529"),
"timeout" (hold the connection for `hold_s`, then close without answering),
"malformed" (200, not JSON), "missing_usage" (200 without usage) and "drop" (close
the socket halfway through the body). `answer`, when set, answers unscripted calls
from their text.

A stated limit (`stated_limit`, changeable mid-run): every answer carries OpenAI's
rate-limit headers (`x-ratelimit-limit-requests`, `-remaining-requests` with the calls
left in flight once this one is answered, `-reset-requests` of `delay_s`; with
`stated_tokens`, `-remaining-tokens` and `-reset-tokens` of `tokens_reset_s`), and a
call that arrives while `stated_limit` are already in flight gets a 429 with
`retry-after: limit_retry_after_s`, as a provider's concurrency limit answers.
`in_flight`, `peak_in_flight` and `rate_limited` say what the fake saw.
"""

from __future__ import annotations

import collections
import contextlib
import http.server
import json
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.demo import llm as demo_llm

#: How long "timeout" holds a connection unless told otherwise; tests set a shorter read timeout.
DEFAULT_HOLD_S = 5.0
#: How often serve_forever checks for shutdown (its default, 0.5 s, slows every test).
POLL_S = 0.02

_OPENAI_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_ANTHROPIC_PATHS = frozenset({"/v1/messages"})
_STATUS_FAULTS_ERROR_TYPE = {
    401: "authentication_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it; headers keep their values (keys lowercased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class _Script:
    """What to do with one call: a fault name or a reply text."""

    fault: str | None = None
    text: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hold_s: float = DEFAULT_HOLD_S
    #: A status fault's error message; None: the fake's default for the status.
    message: str | None = None


class FakeLLM:
    """A threaded HTTP/1.1 server on 127.0.0.1 with scripted replies and faults."""

    def __init__(
        self, kind: str = "openai", *, api_key: str | None = None, delay_s: float = 0.0
    ) -> None:
        self.kind = kind
        #: Seconds every reply waits before it is sent (a slow model), cut short on exit.
        self.delay_s = delay_s
        #: When set, calls without this key get a 401 as a real provider would answer.
        self.api_key = api_key
        self.requests: list[RecordedRequest] = []
        self.observe: Callable[[str, RecordedRequest], None] | None = None
        #: When set, answers an unscripted call from its last message's text (None: the
        #: default reply): a triage's score by the entry, say, whatever the call order.
        self.answer: Callable[[str], str | None] | None = None
        #: Calls at once this fake states (and enforces with 429s); None: it states nothing.
        self.stated_limit: int | None = None
        #: Tokens left that each answer states (None: not stated), renewed after tokens_reset_s.
        self.stated_tokens: int | None = None
        self.tokens_reset_s = 1.0
        #: What a 429 for a call past the stated limit says in retry-after (seconds).
        self.limit_retry_after_s = 1.0
        self.in_flight = 0
        self.peak_in_flight = 0
        #: 429s answered for calls past the stated limit.
        self.rate_limited = 0
        self._script: collections.deque[_Script] = collections.deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._open: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> FakeLLM:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        # A short poll interval keeps shutdown (and so each test) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_S,), name="fake-llm", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None and self._thread is not None
        self._stopping.set()
        self._server.shutdown()
        with self._lock:
            # Wake handler threads blocked on idle keep-alive connections.
            for sock in list(self._open):
                _shutdown_quietly(sock)
        self._server.server_close()
        self._thread.join()

    @property
    def port(self) -> int:
        assert self._server is not None, "use FakeLLM as a context manager"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The base_url for ProviderSettings of this fake's `kind`."""
        return self.url_for(self.kind)

    def url_for(self, kind: str) -> str:
        """OpenAI clients add /chat/completions to .../v1; Anthropic clients add /v1/messages."""
        root = f"http://127.0.0.1:{self.port}"
        return f"{root}/v1" if kind == "openai" else root

    # -- scripting ---------------------------------------------------------------

    def queue_fault(
        self,
        fault: str,
        *,
        retry_after: float | str | None = None,
        retry_after_ms: float | None = None,
        hold_s: float = DEFAULT_HOLD_S,
        message: str | None = None,
    ) -> None:
        """Make the next unscripted call fail this way; see the module docstring for names
        (`message`: what a status fault's error body says)."""
        known = {"timeout", "malformed", "missing_usage", "drop"}
        if fault not in known and not (fault.isdigit() and len(fault) == 3):
            raise ValueError(
                f"unknown fault {fault!r}: use a status code like '429' or one of {sorted(known)}"
            )
        headers: dict[str, str] = {}
        if retry_after is not None:
            headers["retry-after"] = str(retry_after)
        if retry_after_ms is not None:
            headers["retry-after-ms"] = str(retry_after_ms)
        with self._lock:
            self._script.append(
                _Script(fault=fault, headers=headers, hold_s=hold_s, message=message)
            )

    def queue_reply(self, text: str) -> None:
        """Make the next unscripted call answer with exactly this text."""
        with self._lock:
            self._script.append(_Script(text=text))

    @property
    def calls(self) -> int:
        """How many requests arrived so far."""
        with self._lock:
            return len(self.requests)

    # -- used by the handler -----------------------------------------------------

    def _arrive(self) -> bool:
        """Count a call in flight; False (and not counted) when it is past the stated limit."""
        with self._lock:
            if self.stated_limit is not None and self.in_flight >= self.stated_limit:
                self.rate_limited += 1
                return False
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            return True

    def _leave(self) -> dict[str, str]:
        """The call is answered (counted out before its reply is written, so the caller
        never sees a slot the fake still counts); the limit headers for its answer."""
        with self._lock:
            self.in_flight -= 1
            return self._limit_headers()

    def _limit_headers(self) -> dict[str, str]:
        if self.stated_limit is None:
            return {}
        headers = {
            "x-ratelimit-limit-requests": str(self.stated_limit),
            "x-ratelimit-remaining-requests": str(max(0, self.stated_limit - self.in_flight)),
            "x-ratelimit-reset-requests": f"{self.delay_s:g}s",
        }
        if self.stated_tokens is not None:
            headers["x-ratelimit-remaining-tokens"] = str(self.stated_tokens)
            headers["x-ratelimit-reset-tokens"] = f"{self.tokens_reset_s:g}s"
        return headers

    def _refused(self) -> dict[str, str]:
        with self._lock:
            return {**self._limit_headers(), "retry-after": f"{self.limit_retry_after_s:g}"}

    def _record(self, request: RecordedRequest) -> tuple[_Script, int]:
        """Keep the request; return its script and its 1-based number (for ids)."""
        with self._lock:
            self.requests.append(request)
            return (self._script.popleft() if self._script else _Script()), len(self.requests)


class _Server(http.server.ThreadingHTTPServer):
    fake: FakeLLM
    #: Room for a batch's concurrent calls: with the default 5, extra connects wait a
    #: second for a SYN retry.
    request_queue_size = 64

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A caller that went away (timed out, or was killed) is not the fake's error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.fake._lock:
            self.server.fake._open.add(self.connection)

    def finish(self) -> None:
        with self.server.fake._lock:
            self.server.fake._open.discard(self.connection)
        super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows failures, not access logs."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {name.lower(): value for name, value in self.headers.items()}
        fake = self.server.fake
        request = RecordedRequest("POST", self.path, headers, body)
        script, n = fake._record(request)
        if fake.observe is not None:
            fake.observe("request", request)
        shape = (
            "openai"
            if self.path in _OPENAI_PATHS
            else "anthropic"
            if self.path in _ANTHROPIC_PATHS
            else None
        )
        if shape is None:
            self._send(404, {"error": {"message": f"no route {self.path}"}})
        elif fake.api_key is not None and _presented_key(shape, headers) != fake.api_key:
            # The worst case a provider could do: echo the presented key in full.
            echoed = f"Incorrect API key provided: {_presented_key(shape, headers)}"
            self._send(401, _error_body(shape, 401, echoed))
        elif script.fault is not None:
            self._fault(shape, script, body, n)
        elif not fake._arrive():
            self._send(429, _error_body(shape, 429), fake._refused())
        else:
            fake._stopping.wait(fake.delay_s)
            text = script.text
            if text is None and fake.answer is not None:
                text = fake.answer(demo_llm.user_text(body))
            headers = {**demo_llm.request_id_header(shape, n), **fake._leave()}
            self._send(200, _reply(shape, body, text, n), headers)
            self.wfile.flush()
            if fake.observe is not None:
                fake.observe("answered", request)

    def do_GET(self) -> None:
        """The models listing both providers serve at /v1/models (a key check, no call)."""
        headers = {name.lower(): value for name, value in self.headers.items()}
        fake = self.server.fake
        if self.path != "/v1/models":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
        elif fake.api_key is not None and _presented_key(fake.kind, headers) != fake.api_key:
            self._send(401, _error_body(fake.kind, 401))
        else:
            self._send(200, {"data": [{"id": "fake-model", "object": "model"}]})

    def _fault(self, shape: str, script: _Script, request: Any, n: int) -> None:
        fault, fake = script.fault, self.server.fake
        if fault == "timeout":
            fake._stopping.wait(script.hold_s)
            self.close_connection = True
        elif fault == "drop":
            payload = json.dumps(_reply(shape, request, None, n)).encode()
            self._send_head(200, len(payload), {})
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif fault == "malformed":
            self._send_bytes(200, b"<html>upstream hiccup: this is not JSON {", {})
        elif fault == "missing_usage":
            body = _reply(shape, request, None, n)
            del body["usage"]
            self._send(200, body, demo_llm.request_id_header(shape, n))
        else:
            status = int(fault or 500)
            self._send(status, _error_body(shape, status, script.message), script.headers)

    def _send(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        self._send_bytes(status, json.dumps(body).encode(), headers or {})

    def _send_bytes(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
        self._send_head(status, len(payload), headers)
        self.wfile.write(payload)

    def _send_head(self, status: int, length: int, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(length))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()


def _presented_key(shape: str, headers: dict[str, str]) -> str:
    if shape == "anthropic":
        return headers.get("x-api-key", "")
    return headers.get("authorization", "").removeprefix("Bearer ")


def _reply(shape: str, request: Any, text: str | None, n: int) -> dict[str, Any]:
    if text is None:
        text = "DRAFT: " + demo_llm.user_text(request)[:60]
        wants_json = isinstance(request, dict) and request.get("response_format") is not None
        text = json.dumps({"text": text}) if wants_json else text
    return demo_llm.reply_body(shape, request, text, n)


def _error_body(shape: str, status: int, message: str | None = None) -> dict[str, Any]:
    if message is None:
        defaults = {401: "invalid x-api-key", 429: "rate limit exceeded"}
        message = defaults.get(status, f"fake error {status}")
    if shape == "anthropic":
        kind = _STATUS_FAULTS_ERROR_TYPE.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": "fake_error", "code": status}}


def _shutdown_quietly(sock: socket.socket) -> None:
    # OSError: already closed by the peer or by the handler.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
