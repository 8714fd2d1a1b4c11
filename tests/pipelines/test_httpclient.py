"""The process's HTTP clients share one TLS context, and it trusts what httpx would."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest

from bot import app
from bot import settings as settings_mod
from pipelines.ground import httpclient
from pipelines.providers import client as provider_client
from pipelines.providers import settings as provider_settings
from pipelines.service import runtime as runtime_mod
from tests.fakes.feed_server import FeedServer

TOKEN = "987654:tls-context-secret-token_ABCDEFGHIJKL"


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Each TLS context httpx builds from scratch (not one handed to it), as it is built."""
    made: list[object] = []
    real = httpx.create_ssl_context

    def counting(verify: Any = True, *args: Any, **kwargs: Any) -> ssl.SSLContext:
        if not isinstance(verify, ssl.SSLContext):
            made.append(verify)
        return real(verify, *args, **kwargs)

    # httpx's transports call it by the name they imported; `tls_context` by httpx's own.
    monkeypatch.setattr(httpx, "create_ssl_context", counting)
    monkeypatch.setattr(httpx._transports.default, "create_ssl_context", counting)
    httpclient._made.cache_clear()
    yield made
    httpclient._made.cache_clear()


async def test_the_bot_the_engine_and_the_llm_client_build_one_tls_context(
    tmp_path: Path, built: list[object]
) -> None:
    (tmp_path / "pipelines").mkdir()
    cfg = settings_mod.Settings(
        data_dir=tmp_path / "data",
        pipelines_dir=tmp_path / "pipelines",
        telegram=settings_mod.TelegramSettings(
            token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
            base_url="http://127.0.0.1:9/bot",
            operators=[77],
        ),
    )
    application = app.build(cfg, TOKEN)  # PTB's two requests: the calls and the long poll
    runtime = await runtime_mod.Runtime.start(app.runtime_config(cfg, application))
    llm = provider_client.ProviderClient(
        provider_settings.ProviderSettings(
            kind="openai",
            model="m",
            base_url="http://127.0.0.1:9",
            api_key="k",  # type: ignore[arg-type]
        )
    )
    try:
        assert built == [True]
    finally:
        await llm.aclose()
        await runtime.stop()
        await application.bot.shutdown()


def test_the_shared_context_trusts_what_ssl_cert_file_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built: list[object]
) -> None:
    bundle = Path(certifi.where()).read_text()
    first = bundle[: bundle.index("-----END CERTIFICATE-----") + len("-----END CERTIFICATE-----")]
    only = tmp_path / "one-ca.pem"
    only.write_text(first[first.index("-----BEGIN CERTIFICATE-----") :] + "\n")
    monkeypatch.setenv("SSL_CERT_FILE", str(only))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)

    context = httpclient.tls_context()

    assert len(context.get_ca_certs()) == 1
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert httpclient.tls_context() is context
    assert built == [True]


def test_a_client_speaking_http2_is_refused_the_shared_context() -> None:
    # httpcore sets the context's ALPN protocols per connection: an HTTP/2 client would
    # change them under every HTTP/1.1 client sharing it.
    with pytest.raises(ValueError, match=r"HTTP/1\.1 clients only"):
        httpclient.new(http2=True)


def test_a_client_made_while_the_prefetch_runs_waits_for_its_context(
    monkeypatch: pytest.MonkeyPatch, built: list[object]
) -> None:
    counting = httpx.create_ssl_context
    started = threading.Event()

    def slow(verify: Any = True, *args: Any, **kwargs: Any) -> ssl.SSLContext:
        started.set()
        time.sleep(0.2)  # the bundle being parsed, long enough for the race below
        return counting(verify, *args, **kwargs)

    monkeypatch.setattr(httpx, "create_ssl_context", slow)
    thread = httpclient.prefetch()
    assert started.wait(5)

    context = httpclient.tls_context()  # while the prefetch is still making it

    thread.join(5)
    assert built == [True]
    assert httpclient.tls_context() is context


def test_a_prefetch_that_fails_leaves_the_error_to_the_first_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built: list[object]
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    unhandled: list[object] = []
    monkeypatch.setattr(threading, "excepthook", unhandled.append)

    httpclient.prefetch().join(5)

    assert unhandled == []  # nothing printed from the thread
    with pytest.raises(FileNotFoundError):
        httpclient.new()


class Looked(importlib.abc.MetaPathFinder):
    """Records every module name the import system goes looking for (finds nothing)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(self, fullname: str, *args: object) -> importlib.machinery.ModuleSpec | None:
        self.names.append(fullname)
        return None


async def test_a_request_looks_for_no_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpcore imports sniffio inside every lock and shield it sets up; without it that
    import failed, and searched the whole sys.path, several times per request."""
    looked = Looked()
    with FeedServer() as server:
        server.set("/page", "<p>hello</p>", "text/html")
        async with httpclient.new() as client:
            await client.get(server.url("/page"))  # first use may import for real
            monkeypatch.setattr(sys, "meta_path", [looked, *sys.meta_path])
            for _ in range(3):
                assert (await client.get(server.url("/page"))).status_code == 200
    assert looked.names == []
