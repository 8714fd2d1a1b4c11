"""Bounded HTTP listeners for the metrics endpoint and the HTTP trigger.

    worker = listen.worker("api", "127.0.0.1:8080", make_app)   # a RuntimeConfig worker

Tornado serves them: python-telegram-bot already depends on it for webhook mode (its
`webhooks` extra), it runs on the bot's own asyncio loop, and it bounds what a client
may send: header bytes (`max_header_size`, which also bounds their count), body bytes
(`max_body_size`), and the time to send headers and body. On top of those: at most
MAX_CONNECTIONS open connections (another is closed at once) and MAX_HEADERS headers
(checked by the handlers); each handler bounds its own work in time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tornado import httpserver, iostream, web

from bot import settings

log = logging.getLogger(__name__)

#: Open connections at most per listener; one more is closed before it is read.
MAX_CONNECTIONS = 64
#: Refused connections are logged at most once per this many seconds.
REFUSAL_LOG_EVERY_S = 60.0
#: Bytes of request line and headers at most.
MAX_HEADER_BYTES = 16 * 1024
#: Headers at most (checked by the handlers, answered 431).
MAX_HEADERS = 50
#: Seconds a client has to send its headers, and to keep an idle connection open.
HEADER_TIMEOUT_S = 10.0
#: Seconds a client has to send its body.
BODY_TIMEOUT_S = 10.0
#: The hard bound on a body (bytes); handlers refuse smaller bodies with a clear 413 first.
MAX_BODY_BYTES = 1024 * 1024

#: What a served app is made from: the runtime, or the part of it the app reads.
R = TypeVar("R")
Worker = Callable[[R, asyncio.Event], Awaitable[None]]


class BoundedServer(httpserver.HTTPServer):
    """Tornado's HTTP server with a cap on open connections."""

    _warned_at = -REFUSAL_LOG_EVERY_S

    def handle_stream(self, stream: iostream.IOStream, address: tuple[Any, ...]) -> None:
        if len(self._connections) >= MAX_CONNECTIONS:
            now = time.monotonic()
            if now - self._warned_at >= REFUSAL_LOG_EVERY_S:  # one line, not one per refusal
                log.warning("refusing connections: %d already open", MAX_CONNECTIONS)
                self._warned_at = now
            stream.close()
            return
        super().handle_stream(stream, address)


def serve_app(app: web.Application, address: str) -> BoundedServer:
    host, port = settings.split_address(address)
    server = BoundedServer(
        app,
        max_header_size=MAX_HEADER_BYTES,
        max_body_size=MAX_BODY_BYTES,
        idle_connection_timeout=HEADER_TIMEOUT_S,
        body_timeout=BODY_TIMEOUT_S,
    )
    server.listen(port, host)
    return server


def worker(name: str, address: str, make_app: Callable[[R], web.Application]) -> Worker[R]:
    """A runtime worker serving `make_app(runtime)` on `address` until stopped; a failed
    bind (the port taken) crashes it, and its supervisor reports and retries."""

    async def serve(runtime: R, stop: asyncio.Event) -> None:
        server = serve_app(make_app(runtime), address)
        log.info("%s listening on %s", name, address)
        try:
            await stop.wait()
        finally:
            server.stop()
            await server.close_all_connections()

    serve.__module__ = f"bot.{name}"  # the worker's name in health and /status
    return serve


def access_log(handler: web.RequestHandler) -> None:
    """One DEBUG line per request (a 5xx is a WARNING): refused strangers must not be able
    to fill the log. The request line only; headers, where a token travels, never."""
    status = handler.get_status()
    request = handler.request
    log.log(
        logging.WARNING if status >= 500 else logging.DEBUG,
        "%d %s %s (%s) %.1f ms",
        status,
        request.method,
        request.path,
        request.remote_ip,
        1000 * request.request_time(),
    )


def too_many_headers(handler: web.RequestHandler) -> bool:
    return sum(1 for _ in handler.request.headers.get_all()) > MAX_HEADERS
