"""The HTTP side of the local Bot API server: a threaded stdlib server with keep-alive.

Routes `/bot<token>/<method>` to `LocalBotApi.handle_bot_api` and `/control/<name>` to
`localapi_control.handle`. Tuned as measured with PTB: TCP_NODELAY and a deep accept
backlog, or keep-alive replies stall ~40 ms and bursts get their connections reset.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import re
import socket
import threading
import urllib.parse
from typing import TYPE_CHECKING, Any

from bot import localapi_control

if TYPE_CHECKING:
    from bot.localapi import LocalBotApi

# One logger for the whole server, so one level setting shows (or hides) its requests.
logger = logging.getLogger("bot.localapi")

_TOKEN_IN_PATH = re.compile(r"/bot[^/\s]+")


def redact(text: str) -> str:
    """Hide the bot token that sits inside every Bot API path."""
    return _TOKEN_IN_PATH.sub("/bot<token>", text)


class Server(http.server.ThreadingHTTPServer):
    # Bursts of keep-alive connections overflow the default backlog of 5 and get reset.
    request_queue_size = 128
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[Handler], api: LocalBotApi) -> None:
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


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: PTB reuses its connections
    disable_nagle_algorithm = True  # without it every keep-alive reply stalls ~40 ms
    server: Server

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
        except Exception:  # a bug in the fake must not look like a dropped connection
            logger.exception("local Bot API failed on %s", redact(self.path))
            description = "Internal Server Error: see the local Bot API server's log"
            self._send(500, {"ok": False, "error_code": 500, "description": description})
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
