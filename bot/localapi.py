"""A local Telegram Bot API server for tests and the offline demo.

Run it by hand (any well-formed token is accepted):

    python -m bot.localapi --port 8081

then point the bot at it with `GATEHOUSE_TELEGRAM__BASE_URL=http://127.0.0.1:8081/bot`.
In Python:

    with localapi.LocalBotApi() as api:
        app = ApplicationBuilder().token(T).base_url(api.base_url).build()
        api.inject_command(chat_id=42, user_id=42, text="/status news")
        api.wait_for(lambda: api.sent(42), timeout=5)

Bot API requests go to `/bot<token>/<method>` (see `localapi_methods.METHODS`). The control
API plays the other side of the chat: the Python methods below, and the same as JSON over
HTTP under `/control/<name>` (see `localapi_control.ROUTES`) for another process or a page.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.server
import json
import logging
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from bot import localapi_control, localapi_methods, localapi_state

T = TypeVar("T")
logger = logging.getLogger(__name__)

_TOKEN = re.compile(r"^\d+:[A-Za-z0-9_-]+$")
_TOKEN_IN_PATH = re.compile(r"/bot[^/\s]+")
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
# Parameters whose values are secrets and must not be kept in the call log.
_SECRET_PARAMS = frozenset({"secret_token"})


def redact(text: str) -> str:
    """Hide the bot token that sits inside every Bot API path."""
    return _TOKEN_IN_PATH.sub("/bot<token>", text)


class LocalBotApi:
    """The server plus the control API a test (or the demo's web chat) drives it with."""

    def __init__(
        self,
        token: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        cors_origin: str | None = None,
    ) -> None:
        """`token`: if given, other tokens get 401. `cors_origin`: a page origin allowed to
        call `/control/...` from a browser (none by default)."""
        if host not in _LOOPBACK:
            raise ValueError(f"host must be a loopback address {_LOOPBACK}, got {host!r}")
        self.state = localapi_state.LocalApiState()
        self.token = token
        self.cors_origin = cors_origin
        self._address = (host, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> LocalBotApi:
        self._server = _Server(self._address, _Handler, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        logger.info("local Bot API listening on %s", self.base_url)
        return self

    def stop(self) -> None:
        """Stop accepting, end long polls and keep-alive connections, join every thread."""
        if self._server is None or self._thread is None:
            return
        self._server.shutdown()
        self._server.closing = True
        self.state.close()  # pending long polls answer now, then their connections close
        self._server.close_connections()
        self._server.server_close()
        self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> LocalBotApi:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the local Bot API server is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """For `ApplicationBuilder().base_url(...)`: PTB appends the token and the method."""
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file/bot"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/control"

    # -- the user's side of the chat ------------------------------------------

    def inject_message(
        self,
        chat_id: int,
        from_user_id: int,
        text: str,
        reply_to_message_id: int | None = None,
        *,
        entities: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A user writes `text` in the chat; returns the queued Update."""
        if not text:
            raise ValueError("text must be a non-empty string")
        if reply_to_message_id is not None and not self.state.find(chat_id, reply_to_message_id):
            raise ValueError(f"chat {chat_id} has no message {reply_to_message_id} to reply to")
        message = self.state.add_message(
            chat_id,
            from_bot=False,
            sender=localapi_state.user_object(from_user_id),
            text=text,
            entities=entities or [],
            reply_markup=None,
            reply_to_message_id=reply_to_message_id,
            now=int(time.time()),
        )
        return self.state.push_update({"message": self.state.telegram_message(message)})

    def inject_command(self, chat_id: int, user_id: int, text: str) -> dict[str, Any]:
        """A user sends a command such as "/status news", tagged as Telegram tags it."""
        if not text.startswith("/") or len(text) < 2:
            raise ValueError(f"a command starts with '/' and a name, got {text!r}")
        command = text.split(maxsplit=1)[0]
        entity = {"type": "bot_command", "offset": 0, "length": len(command)}
        return self.inject_message(chat_id, user_id, text, entities=[entity])

    def inject_callback(self, chat_id: int, user_id: int, message_id: int, data: str) -> str:
        """A user taps a button with `data` under a message; returns the callback_query id."""
        message = self.state.find(chat_id, message_id)
        if message is None:
            raise ValueError(f"chat {chat_id} has no message {message_id} to tap on")
        query = {
            "from": localapi_state.user_object(user_id),
            "chat_instance": f"local-{chat_id}",
            "message": self.state.telegram_message(message),
            "data": data,
        }
        query_id = self.state.open_callback(query)
        self.state.push_update({"callback_query": self.state.callback_query(query_id)})
        return query_id

    # -- what the bot did -----------------------------------------------------

    def sent(self, chat_id: int | None = None) -> list[localapi_state.ChatMessage]:
        """Messages the bot sent, current text and markup, in order (deleted ones left out)."""
        return self.state.sent(chat_id)

    def messages(self, chat_id: int) -> list[localapi_state.ChatMessage]:
        """The whole chat as it looks now: the users' messages and the bot's."""
        return self.state.messages(chat_id)

    def history(self, chat_id: int, message_id: int) -> list[localapi_state.ChatMessage]:
        """Every version of one message: as sent, each edit, and a deletion."""
        return self.state.history(chat_id, message_id)

    def callback_answers(self) -> list[dict[str, Any]]:
        return self.state.callback_answers()

    def calls(self, method: str | None = None) -> list[localapi_state.CallRecord]:
        """Bot API requests answered so far, with their HTTP status (method as sent)."""
        return self.state.calls(method)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:
        """Block until `predicate()` is truthy and return its value (TimeoutError if not)."""
        return self.state.wait_for(predicate, timeout)

    # The wait runs in a worker thread that must end by itself: asyncio.timeout would only
    # cancel the await and leave the thread waiting, hence a timeout parameter.
    async def await_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:  # noqa: ASYNC109
        """`wait_for` without blocking the event loop the bot under test runs in."""
        return await asyncio.to_thread(self.state.wait_for, predicate, timeout)

    # -- faults ---------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        status: int = 429,
        retry_after: int = 3,
        description: str | None = None,
    ) -> None:
        """The next call of `method` fails: 429 with retry_after by default, or any status."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error status (400-599), got {status}")
        if description is None:
            description = (
                f"Too Many Requests: retry after {retry_after}"
                if status == 429
                else http.HTTPStatus(status).phrase
            )
        after = retry_after if status == 429 else None
        self.state.add_fault(method.lower(), localapi_state.Fault(status, description, after))

    def slow_next(self, method: str, seconds: float) -> None:
        """The next call of `method` waits `seconds` before it is answered."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self.state.add_fault(method.lower(), localapi_state.Fault(None, delay=seconds))

    # -- serving a Bot API request --------------------------------------------

    def handle_bot_api(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        """Answer one Bot API call: (HTTP status, JSON body)."""
        status, body = self._answer(token, method, params)
        kept = {k: ("<redacted>" if k in _SECRET_PARAMS else v) for k, v in params.items()}
        self.state.record_call(method, status, kept, token if _TOKEN.match(token) else None)
        return status, body

    def _answer(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        if not _TOKEN.match(token):
            return _error(localapi_state.ApiError(404, "Not Found"))
        if self.token is not None and token != self.token:
            return _error(localapi_state.ApiError(401, "Unauthorized"))
        handler = localapi_methods.METHODS.get(method.lower())
        if handler is None:
            return _error(localapi_state.ApiError(404, "Not Found: method not found"))
        fault = self.state.take_fault(method.lower())
        if fault is not None:
            self.state.sleep(fault.delay)
            if fault.status is not None:
                parameters = {"retry_after": fault.retry_after} if fault.retry_after else None
                return _error(localapi_state.ApiError(fault.status, fault.description, parameters))
        try:
            decoded = localapi_methods.decode_params(params)
            request = localapi_methods.Request(self.state, token, decoded, int(time.time()))
            return 200, {"ok": True, "result": handler(request)}
        except localapi_state.ApiError as exc:
            return _error(exc)


def _error(exc: localapi_state.ApiError) -> tuple[int, Any]:
    body: dict[str, Any] = {"ok": False, "error_code": exc.status, "description": exc.description}
    if exc.parameters:
        body["parameters"] = exc.parameters
    return exc.status, body


class _Server(http.server.ThreadingHTTPServer):
    # Bursts of keep-alive connections overflow the default backlog of 5 and get reset.
    request_queue_size = 128
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], api: LocalBotApi) -> None:
        self.api = api
        self.connections: set[socket.socket] = set()
        self.busy: set[socket.socket] = set()  # connections in the middle of a request
        self.connections_lock = threading.Lock()
        self.closing = False
        super().__init__(address, handler)

    def close_connections(self) -> None:
        """Wake handler threads blocked reading an idle keep-alive connection."""
        with self.connections_lock:
            for connection in self.connections - self.busy:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: PTB reuses its connections
    disable_nagle_algorithm = True  # without it every keep-alive reply stalls ~40 ms
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), redact(format % args))

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def do_OPTIONS(self) -> None:
        """CORS preflight for a browser page calling /control (only if an origin is set)."""
        self._send(204 if self.server.api.cors_origin else 404, None)

    def _route(self) -> None:
        with self.server.connections_lock:
            self.server.busy.add(self.connection)
        try:
            self._dispatch()
        finally:
            with self.server.connections_lock:
                self.server.busy.discard(self.connection)

    def _dispatch(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        try:
            params = self._params(url.query)
        except ValueError as exc:
            self._send(400, {"ok": False, "error_code": 400, "description": f"Bad Request: {exc}"})
            return
        parts = url.path.strip("/").split("/")
        if len(parts) == 2 and parts[0].startswith("bot"):
            self._send(*self.server.api.handle_bot_api(parts[0][3:], parts[1], params))
        elif len(parts) == 2 and parts[0] == "control":
            self._send(*localapi_control.handle(self.server.api, parts[1], params))
        else:
            self._send(404, {"ok": False, "error_code": 404, "description": "Not Found"})

    def _params(self, query: str) -> dict[str, Any]:
        """Query string, then a form or JSON body, as one flat dict of parameters."""
        params: dict[str, Any] = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        kind = self.headers.get_content_type()
        if not body:
            return params
        if kind == "application/json":
            decoded = json.loads(body)
            if not isinstance(decoded, dict):
                raise ValueError("a JSON body must be an object of parameters")
            params.update(decoded)
        elif kind == "application/x-www-form-urlencoded":
            params.update(urllib.parse.parse_qsl(body.decode(), keep_blank_values=True))
        else:
            raise ValueError(f"unsupported Content-Type {kind!r}; send form fields or JSON")
        return params

    def _send(self, status: int, body: Any) -> None:
        payload = b"" if body is None else json.dumps(body, default=_jsonable).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if self.server.closing:
                self.send_header("Connection", "close")  # also sets close_connection
            if self.server.api.cors_origin and self.path.startswith("/control/"):
                self.send_header("Access-Control-Allow-Origin", self.server.api.cors_origin)
                self.send_header("Access-Control-Allow-Headers", "Content-Type")
            self.end_headers()
            self.wfile.write(payload)
        except OSError:  # the client went away (a cancelled long poll, a stopping server)
            self.close_connection = True


def _jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {name: getattr(value, name) for name in value.__dataclass_fields__}
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bot.localapi", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", choices=_LOOPBACK)
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--cors-origin", help="a page origin allowed to call /control")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    api = LocalBotApi(host=args.host, port=args.port, cors_origin=args.cors_origin).start()
    print(f"Bot API: {api.base_url}   control: {api.control_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        api.stop()


if __name__ == "__main__":
    main()
