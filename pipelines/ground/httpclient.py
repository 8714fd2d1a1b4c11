"""HTTP clients that share the process's one TLS context.

    client = httpclient.new(timeout=httpx.Timeout(30.0, connect=10.0))
    client = httpclient.fetching(timeout=...)  # the engine's: each connection dials what
                                                # its one lookup found and judged (dialer)
    HTTPXRequest(httpx_kwargs=httpclient.shared_tls())   # python-telegram-bot's requests

An httpx client left to itself builds its own TLS context and parses the whole CA
bundle into it again: about 30 ms a client on a 2-vCPU VM, and `gatehouse run` built
three before its first getUpdates (PTB's two and the engine's; a fourth with an LLM).
An `ssl.SSLContext` is made to be shared, so one serves them all. It is made on first
use by httpx's own `create_ssl_context`, so it trusts what each client would have
trusted: SSL_CERT_FILE or SSL_CERT_DIR when set, else certifi's bundle. `gatehouse run`
starts making it on a thread of its own while it imports the bot (`prefetch`): OpenSSL
parses the bundle without holding the GIL, so the two overlap.

Every client that shares it speaks HTTP/1.1, httpx's and PTB's default: httpcore sets
the context's ALPN protocols on each connection it opens, so a client speaking HTTP/2
would change them under the others, and needs a context of its own.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import ssl
import threading
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    import httpcore

    from pipelines.ground import addresses

#: Held while the context is made: a caller waits for the one a prefetch is making.
_making = threading.Lock()


@functools.cache
def _made() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def tls_context() -> ssl.SSLContext:
    """The one TLS context, made on first use."""
    with _making:
        return _made()


def prefetch() -> threading.Thread:
    """Start making the context on a thread of its own. A failure is left for the first
    client that needs the context, which makes it again and meets the error itself."""

    def make() -> None:
        with contextlib.suppress(Exception):
            tls_context()

    thread = threading.Thread(target=make, name="tls-context", daemon=True)
    thread.start()
    return thread


def shared_tls() -> dict[str, Any]:
    """The keyword that hands a client the shared context (for PTB's `httpx_kwargs`)."""
    return {"verify": tls_context()}


def new(**kwargs: Any) -> httpx.AsyncClient:
    """An `httpx.AsyncClient(**kwargs)` that verifies with the shared context."""
    if kwargs.get("http2"):
        raise ValueError("the shared TLS context serves HTTP/1.1 clients only (see httpclient)")
    return httpx.AsyncClient(**shared_tls(), **kwargs)


class Fetching(httpx.AsyncClient):
    """A client over dialer.Transport: the one that may fetch what sources name, since
    only it can refuse a private address at the connection (dialer.PUBLIC_ONLY)."""

    def __init__(self, resolve: addresses.Resolver, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: What its connections resolve with; image URLs are judged with it too.
        self.resolve = resolve


def fetching(
    *,
    resolve: addresses.Resolver | None = None,
    network: httpcore.AsyncNetworkBackend | None = None,
    **kwargs: Any,
) -> Fetching:
    """A Fetching client with the shared context. `resolve` (default: the system's
    resolver) and `network` (default: real sockets) are where tests put a local DNS
    server and a dialer that records each address; HTTP(S)_PROXY is not used, since a
    proxy would resolve the names itself."""
    from pipelines.ground import (
        addresses,
        dialer,  # with the engine only: it loads the sources' package
    )

    resolve = resolve or addresses.system_resolve
    return Fetching(resolve, transport=dialer.Transport(tls_context(), resolve, network), **kwargs)


def why_unreachable(exc: BaseException) -> str:
    """What stopped a connection, as a person can act on it: "the name did not resolve",
    "the connection was refused", "the connection timed out", else the error's class.

    Read from the causes httpx chains under its ConnectError (a socket.gaierror, a
    ConnectionRefusedError, ...); their text is not used, so no URL or header is repeated.
    """
    seen: BaseException | None = exc
    for _ in range(10):  # a chain is short; a cycle must not hang
        if seen is None:
            break
        if isinstance(seen, socket.gaierror):
            return "the name did not resolve"
        if isinstance(seen, ConnectionRefusedError):
            return "the connection was refused (nothing listens on that port)"
        if isinstance(seen, TimeoutError | httpx.TimeoutException):
            return "the connection timed out"
        if isinstance(seen, ssl.SSLError):
            return f"TLS failed ({seen.reason or type(seen).__name__})"
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__
