"""The HTTP side of the local Bot API server: a threaded stdlib server with keep-alive.

Routes `/bot<token>/<method>` to `LocalBotApi.handle_bot_api` and `/control/<name>` to
`localapi_control.handle`. Tuned for PTB: TCP_NODELAY and a deep accept
backlog, or keep-alive replies stall ~40 ms and bursts get their connections reset.

It listens on loopback only, yet any web page the user opens can send requests to it,
so: a request whose `Host` is not this server is refused (DNS rebinding), a body is read
only with a valid `Content-Length` up to MAX_BODY, and `/control/*` changes state only on
a JSON POST, which a page elsewhere cannot send without a CORS preflight this server
grants only to `cors_origin` (a plain form POST is refused).
"""

from __future__ import annotations

import contextlib
import email.parser
import email.policy
import http.server
import json
import logging
import socket
import sys
import threading
import urllib.parse
from typing import Any, Protocol

from bot.demo.botapi import calls
from bot.demo.botapi import control as localapi_control
from pipelines.text import redaction

# One logger for the whole server, so one level setting shows (or hides) its requests.
logger = logging.getLogger("bot.demo.botapi.localapi")

#: The largest request body read (bytes): a 4,096-character message with its keyboard,
#: form-encoded, is far below it.
MAX_BODY = 1024 * 1024


class Refused(Exception):
    """A request refused before it is routed: an HTTP status and Telegram-style wording."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.description = description


def check_host(host: str | None, port: int) -> None:
    """Refuse a request not addressed to this server by name, as DNS rebinding would be."""
    allowed = {f"{name}:{port}" for name in ("127.0.0.1", "localhost")}
    if (host or "").strip().lower() not in allowed:
        shown = repr((host or "")[:64])
        raise Refused(
            403,
            f"Forbidden: Host {shown} is not this server; use 127.0.0.1:{port} or localhost:{port}",
        )


def check_control(name: str, method: str, content_type: str | None) -> None:
    """Refuse a control request that is not a JSON POST, unless it is a GET that only
    reads. `content_type`: the request's media type, None without the header. A POST
    without a body is held to the same rule: its query string would be its parameters."""
    if method == "POST" and content_type != "application/json":
        shown = content_type or "no Content-Type"
        raise Refused(
            415, f"Unsupported Media Type: /control takes JSON (application/json), not {shown}"
        )
    routes = localapi_control.ROUTES
    if name in routes and name not in localapi_control.READS and method != "POST":
        raise Refused(405, f"Method Not Allowed: {name} changes state; POST its parameters as JSON")


def content_length(headers: Any, limit: int) -> int:
    """The body's declared length: digits only, at most `limit`; no chunked bodies."""
    if headers.get("Transfer-Encoding"):
        raise Refused(400, "Bad Request: Transfer-Encoding is not supported; send Content-Length")
    values = headers.get_all("Content-Length") or []
    if not values:
        return 0
    text = str(values[0]).strip()
    if len(values) > 1 or not (text.isascii() and text.isdigit()):
        raise Refused(400, "Bad Request: Content-Length must be one whole number of bytes")
    length = int(text)
    if length > limit:
        raise Refused(413, f"Request Entity Too Large: at most {limit} bytes")
    return length


def multipart(content_type: str, body: bytes) -> dict[str, Any]:
    """A multipart/form-data body's fields: text as str, files as `Upload`."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise ValueError("a multipart body needs a boundary in its Content-Type")
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        content = part.get_payload(decode=True)
        if not isinstance(name, str) or not isinstance(content, bytes):
            raise ValueError("every multipart part needs a name and a body")
        filename = part.get_filename()
        fields[name] = calls.Upload(filename, content) if filename else content.decode()
    return fields


def redact(text: str) -> str:
    """Hide the bot token that sits inside every Bot API path."""
    return redaction.redact(text)


class Served(localapi_control.Driven, Protocol):
    """What the server answers with: `server.LocalBotApi`, named by shape (no circle)."""

    cors_origin: str | None

    def handle_bot_api(
        self, token: str, method: str, params: dict[str, Any]
    ) -> tuple[int, Any]: ...


class QuietServer(http.server.ThreadingHTTPServer):
    """A threading HTTP server that does not print a traceback when a client goes away."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a closed tab, a killed bot, a stop mid-reply: nothing to report
        super().handle_error(request, client_address)


class Server(QuietServer):
    # Bursts of keep-alive connections overflow the default backlog of 5 and get reset.
    request_queue_size = 128
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[Handler], api: Served) -> None:
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
        parts = url.path.strip("/").split("/")
        control = len(parts) == 2 and parts[0] == "control"
        try:
            check_host(self.headers.get("Host"), self.server.server_address[1])
            if control:
                check_control(parts[1], self.command, self._content_type())
            params = self._params(url.query)
        except Refused as exc:
            # The body may be unread: this connection cannot carry another request.
            self.close_connection = True
            self._send(exc.status, _refusal(exc.status, exc.description))
            return
        except ValueError as exc:
            self._send(400, _refusal(400, f"Bad Request: {exc}"))
            return
        if len(parts) == 2 and parts[0].startswith("bot"):
            self._send(*self.server.api.handle_bot_api(parts[0][3:], parts[1], params))
        elif control:
            self._send(*localapi_control.handle(self.server.api, parts[1], params))
        else:
            self._send(404, _refusal(404, "Not Found"))

    def _content_type(self) -> str | None:
        """The request's media type, None when it sends no Content-Type."""
        return self.headers.get_content_type() if self.headers.get("Content-Type") else None

    def _params(self, query: str) -> dict[str, Any]:
        """Query string, then a form or JSON body, as one flat dict of parameters."""
        params: dict[str, Any] = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        length = content_length(self.headers, MAX_BODY)
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
        elif kind == "multipart/form-data":
            params.update(multipart(self.headers.get("Content-Type", ""), body))
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


def _refusal(status: int, description: str) -> dict[str, Any]:
    return {"ok": False, "error_code": status, "description": description}


def _jsonable(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {name: getattr(value, name) for name in value.__dataclass_fields__}
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
