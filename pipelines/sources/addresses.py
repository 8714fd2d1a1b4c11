"""Refusing links to private addresses: a fetched feed names the pages gatehouse opens,
so without this a feed could make it read the host's own services (cloud metadata at
169.254.169.254, an admin page on localhost).

    await addresses.check("https://example.org/a", allow_private=False)  # SourceError if not

The check resolves the host and refuses it when any address it resolves to is not a
global one (loopback, private, link-local, shared, reserved). The HTTP client resolves
the name again when it connects, so a name served with a very short TTL could change
answer between the two; the check stops links that plainly point inward.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import urllib.parse

from pipelines.sources import base


async def check(url: str, *, allow_private: bool) -> None:
    """Raise SourceError unless `url` is http(s) and, when `allow_private` is false, its
    host resolves to global addresses only."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise base.SourceError("the link is not an http:// or https:// URL")
    if allow_private:
        return
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:
        raise base.SourceError(f"{host} could not be resolved: {type(exc).__name__}") from None
    for *_, sockaddr in found:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if not address.is_global:
            raise base.SourceError(
                f"{host} resolves to a private address ({address}); set"
                " allow_private_addresses: true on the source to fetch it"
            )
