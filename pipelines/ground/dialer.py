"""Connections that go where the check said: each new connection resolves its host once,
judges every address it got, and dials one of those addresses, never a second lookup.

    transport = dialer.Transport(tls, addresses.system_resolve)   # httpclient.fetching()
    await client.get(url, extensions=dialer.PUBLIC_ONLY)           # private addresses refused

The rule for an address and the lookup (bounded here by the connect timeout) live in
pipelines.ground.addresses; this module is where httpcore meets them.

Why here: a check that resolves a name and a client that resolves it again to connect
can get two answers (DNS rebinding: a public address first, 127.0.0.1 second). The
network backend under httpcore's pool is the one place every connection passes, so each
hop of a redirect is judged by the connection it really opens. httpcore takes the TLS
server name, the certificate's host and the Host header from the URL, not from the
address dialed, so those stay the name's.

A request marked PUBLIC_ONLY goes to a pool of its own: a kept-alive connection that a
source allowing private addresses opened to an intranet host is never lent to a fetch
that may not reach it.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from pipelines.ground import addresses

#: The request extension that refuses private addresses for this request's connection.
PUBLIC_ONLY_KEY = "gatehouse.public_only"
PUBLIC_ONLY = {PUBLIC_ONLY_KEY: True}


class Refused(httpcore.ConnectError):
    """The host could not be resolved, or resolved to an address this fetch may not
    reach (addresses.Unreachable, made an httpcore error so httpx maps it to ConnectError);
    the message names the host, never the URL."""


class Backend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend with one lookup per connection: it dials the addresses
    it resolved (and, with `public_only`, judged), in the order the resolver gave."""

    def __init__(
        self,
        resolve: addresses.Resolver,
        *,
        public_only: bool,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._resolve = resolve
        self._public_only = public_only
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            found = await addresses.lookup(self._resolve, host, port, timeout)
            if self._public_only:
                addresses.judged(host, found)
        except addresses.Unreachable as exc:
            raise Refused(str(exc)) from None
        failure: httpcore.ConnectError | None = None
        for address in found:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except httpcore.ConnectError as exc:  # the next address may answer
                failure = exc
        assert failure is not None  # lookup() never returns an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return await self._inner.connect_unix_socket(path, timeout, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class Transport(httpx.AsyncBaseTransport):
    """httpx's own HTTP/1.1 transport over a Backend: one pool for requests marked
    PUBLIC_ONLY and one for the rest (see the module's docstring)."""

    def __init__(
        self,
        tls: ssl.SSLContext,
        resolve: addresses.Resolver,
        network: httpcore.AsyncNetworkBackend | None = None,
        limits: httpx.Limits | None = None,
    ) -> None:
        self._open = _over(Backend(resolve, public_only=False, inner=network), tls, limits)
        self._public = _over(Backend(resolve, public_only=True, inner=network), tls, limits)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        public = bool(request.extensions.get(PUBLIC_ONLY_KEY))
        return await (self._public if public else self._open).handle_async_request(request)

    async def aclose(self) -> None:
        await self._open.aclose()
        await self._public.aclose()


def _over(
    backend: Backend, tls: ssl.SSLContext, limits: httpx.Limits | None
) -> httpx.AsyncHTTPTransport:
    limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
    transport = httpx.AsyncHTTPTransport(verify=tls, limits=limits)
    # httpx takes no network backend, so its pool is replaced by one built with the same
    # settings and this backend (tests/pipelines/test_dialer.py sees every dial go here).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=tls,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=backend,
    )
    return transport
