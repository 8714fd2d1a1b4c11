"""A network for fetch-safety tests that sends no packet past loopback: it records every
address httpcore's pool dials and reaches a "public" address only through a route to a
local server.

    network = Network({"93.184.215.14": site.port})   # that public address is this server
    client = httpclient.fetching(resolve=dns.resolve, network=network)
    network.dialed                                   # [("93.184.215.14", 80), ...]

A loopback address is dialed for real; any other address without a route fails at once
with a ConnectError, as an unreachable host would, without touching the network.
`resolve` answers without a DNS server: localhost is 127.0.0.1, any other name PUBLIC.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

import httpcore

#: A global address that no test ever reaches: what `resolve` answers for a name.
PUBLIC = "93.184.215.14"


async def resolve(host: str, port: int) -> list[str]:
    """A resolver (addresses.Resolver) that sends nothing: localhost or PUBLIC."""
    return ["127.0.0.1"] if host.lower() == "localhost" else [PUBLIC]


class Network(httpcore.AsyncNetworkBackend):
    def __init__(self, routes: dict[str, int] | None = None) -> None:
        self._routes = dict(routes or {})
        self._real = httpcore.AnyIOBackend()
        self.dialed: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.dialed.append((host, port))
        if host in self._routes:
            return await self._real.connect_tcp("127.0.0.1", self._routes[host], timeout)
        if not ipaddress.ip_address(host).is_loopback:  # a name here is a bug: it must fail
            raise httpcore.ConnectError(f"{host} is unreachable in tests")
        return await self._real.connect_tcp(host, port, timeout, local_address, socket_options)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("no unix sockets in tests")

    async def sleep(self, seconds: float) -> None:
        await self._real.sleep(seconds)
