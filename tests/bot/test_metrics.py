"""The metrics listener over a real socket: store figures per scrape, shared by close
scrapes, and the listener's bounds (connections, headers)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import parser

from bot.web import listen, metrics
from pipelines.service import runtime as runtime_mod
from store import db, items
from store.audit import sealer
from tests.bot.test_api import PIPELINE, free_port


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, **config: Any) -> AsyncIterator[tuple[runtime_mod.Runtime, str]]:
    (tmp_path / "inbox").mkdir()
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "news.yaml").write_text(PIPELINE.format(inbox=tmp_path / "inbox"))
    address = f"127.0.0.1:{free_port()}"
    cfg = runtime_mod.RuntimeConfig(
        store=db.StoreConfig(data_dir=tmp_path / "data"),
        pipelines_dir=tmp_path / "pipelines",
        workers=(metrics.worker(address),),
        **config,
    )
    runtime = await runtime_mod.Runtime.start(cfg)
    async with httpx.AsyncClient() as client:
        for _ in range(200):
            try:
                await client.get(f"http://{address}/metrics")
                break
            except httpx.ConnectError:
                await asyncio.sleep(0.02)
    try:
        yield runtime, address
    finally:
        await runtime.stop()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[runtime_mod.Runtime, str]]:
    async with serving(tmp_path) as found:
        yield found


async def sample(address: str, name: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://{address}/metrics")).text
    for family in parser.text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name:
                return found.value
    raise AssertionError(f"no {name}")


async def test_a_scrape_shows_how_long_audit_events_wait_to_be_sealed(tmp_path: Path) -> None:
    moment = [datetime.now(UTC)]
    # Passes 600 s apart: the one at start found nothing, the next will not come.
    async with serving(tmp_path, seal_every_s=600.0, clock=lambda: moment[0]) as (
        runtime,
        address,
    ):
        assert await sample(address, "gatehouse_audit_unsealed_age_seconds") == 0
        stamped = runtime.now() - timedelta(hours=1)  # an event's own time tells nothing
        await runtime.store.write(items.create_sync, "news", "api", "x1", {"title": "T"}, stamped)
        assert await sample(address, "gatehouse_audit_unsealed_age_seconds") == 0
        moment[0] += timedelta(seconds=5)
        assert await sample(address, "gatehouse_audit_unsealed_age_seconds") == 5
        assert await sample(address, "gatehouse_audit_unsealed_events") == 1
        await sealer.seal(runtime.store)
        assert await sample(address, "gatehouse_audit_unsealed_age_seconds") == 0


async def new_items(address: str) -> float:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"http://{address}/metrics")).text
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "gatehouse_items" and sample.labels["state"] == "new":
                return sample.value
    raise AssertionError("no gatehouse_items{state=new}")


async def test_close_scrapes_share_one_read_of_the_store(
    served: tuple[runtime_mod.Runtime, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime, address = served
    monkeypatch.setattr(metrics, "MIN_READ_INTERVAL_S", 0.5)
    await asyncio.sleep(0.6)
    assert await new_items(address) == 0
    await runtime.store.write(items.create_sync, "news", "api", "x1", {"title": "T"}, runtime.now())
    assert await new_items(address) == 0  # within the interval: the same read
    await asyncio.sleep(0.6)
    assert await new_items(address) == 1


async def test_connections_past_the_cap_are_closed(
    served: tuple[runtime_mod.Runtime, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, address = served
    monkeypatch.setattr(listen, "MAX_CONNECTIONS", 3)
    host, port = address.split(":")
    held = [socket.create_connection((host, int(port))) for _ in range(3)]
    try:
        await asyncio.sleep(0.2)  # the server has taken them
        extra = socket.create_connection((host, int(port)))
        extra.settimeout(5)
        extra.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        # Closed unanswered: an orderly close, or a reset since the request was unread.
        with contextlib.suppress(ConnectionResetError):
            assert await asyncio.to_thread(extra.recv, 100) == b""
        extra.close()
    finally:
        for sock in held:
            sock.close()
    await asyncio.sleep(0.2)
    assert await new_items(address) == 0  # room again once they closed


async def test_too_many_headers_are_refused(served: tuple[runtime_mod.Runtime, str]) -> None:
    _, address = served
    many = {f"X-H{i}": "1" for i in range(listen.MAX_HEADERS + 1)}
    async with httpx.AsyncClient() as client:
        answer = await client.get(f"http://{address}/metrics", headers=many)
    assert answer.status_code == 431
