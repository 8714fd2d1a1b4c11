"""Refusing links to private addresses: a fetched feed names the pages gatehouse opens and
the images cards and posts show, so without this a feed could make gatehouse read the
host's own services (cloud metadata at 169.254.169.254, an admin page on localhost), or
have a self-hosted Bot API server fetch them from the operator's network.

    await common.get(client, url, ..., public_only=True) # refused at the connection
    await addresses.refusal("http://localhost/x.png")   # why not, or None

An article is judged where it is fetched: the engine's client (httpclient.fetching)
resolves each connection's host once, judges every address, and dials one of those
(pipelines.ground.dialer), for each hop of a redirect. An image gatehouse never fetches, so
its URL is judged by a lookup of its own (bounded by LOOKUP_SECONDS). The rule is
`private`: not a global address, an IPv6 address embedding an IPv4 one judged by
the IPv4 address too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable

#: The longest an image URL's host may take to resolve (seconds) before it is dropped.
LOOKUP_SECONDS = 3.0


#: Resolves (host, port) to the addresses to dial, as strings; the production default is
#: the system's resolver (system_resolve), tests give one that asks a local DNS server.
Resolver = Callable[[str, int], Awaitable[list[str]]]
#: NAT64 prefixes (RFC 6052's well-known one, RFC 8215's local-use one): the IPv4 address
#: sits in the last 32 bits, and a translator on the path would reach it.
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
#: IPv4-compatible addresses (deprecated, ::a.b.c.d): some stacks still route them as IPv4.
_COMPATIBLE = ipaddress.ip_network("::/96")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Unreachable(Exception):
    """The host could not be resolved, or resolved to an address this fetch may not
    reach; the message says which, naming the host and never the URL."""


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _COMPATIBLE or any(address in net for net in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def private(address: Address) -> bool:
    """Whether `address` is not a global one (loopback, private, link-local, shared,
    reserved), judging an IPv6 address that embeds an IPv4 one by the IPv4 address too."""
    inner = embedded_ipv4(address)
    return not address.is_global or (inner is not None and not inner.is_global)


def parse(text: str) -> Address:
    """An address from a resolver's answer (an IPv6 zone such as %eth0 dropped)."""
    return ipaddress.ip_address(text.split("%")[0])


def _private_wording(host: str, address: Address) -> str:
    """The reason a fetch of `host` was refused, as a card shows it."""
    return (
        f"{host} resolves to a private address ({address}); set"
        " allow_private_addresses: true on the source to fetch it"
    )


async def system_resolve(host: str, port: int) -> list[str]:
    """The system's answer for `host`, looked up once (getaddrinfo, on a thread)."""
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in found))


async def lookup(resolve: Resolver, host: str, port: int, seconds: float | None) -> list[str]:
    """`resolve(host, port)` within `seconds`; a literal address is its own answer."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    try:
        async with asyncio.timeout(seconds):
            found = await resolve(host, port)
    except TimeoutError:
        raise Unreachable(f"{host} was not resolved within {seconds:g} s") from None
    except (OSError, ValueError) as exc:
        raise Unreachable(f"the name {host} did not resolve ({type(exc).__name__})") from None
    if not found:
        raise Unreachable(f"the name {host} did not resolve (no address)")
    return found


def judged(host: str, found: Iterable[str]) -> None:
    """Raise Refused when any address `host` resolved to is private: one inward answer
    among public ones is enough to steer a connection inward."""
    for text in found:
        address = parse(text)
        if private(address):
            raise Unreachable(_private_wording(host, address))


def resolver_of(client: object) -> Resolver:
    """The resolver `client` connects with (httpclient.Fetching), so an image is judged by
    the answers its articles would be; the system's for any other client."""
    found = getattr(client, "resolve", None)
    return found if callable(found) else system_resolve


async def refusal(
    url: str,
    *,
    resolve: Resolver = system_resolve,
    seconds: float = LOOKUP_SECONDS,
) -> str | None:
    """Why `url` may not be shown (its host is or resolves to a private address, or does
    not resolve), or None when every address it resolves to is global."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        judged(host, await lookup(resolve, host, port, seconds))
    except ValueError:
        return f"{host} has a port that is not a number"
    except Unreachable as exc:
        return str(exc)
    return None
