"""Shared fixtures: a real store in a private temporary data directory; and which tests
are slow (`python3 dev.py test --fast` leaves them out)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from pipelines.ground import httpclient
from pipelines.text import redaction
from store import db
from tests.fakes import network

#: Whole processes, browsers and real servers: every end-to-end test, and the few files
#: elsewhere that run many subprocesses or stateful searches (each over 15 s a run).
SLOW_DIRS = ("e2e",)
SLOW_FILES = frozenset({
    "test_bot_sender.py", "test_seen_and_runs.py", "test_api.py", "test_races.py",
    "test_machine_stateful.py", "test_cli.py", "test_ledger_stateful.py",
    "test_source_imap.py",
})  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path
        if path.parent.name in SLOW_DIRS or path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def remembered_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The secrets a test makes its process remember are forgotten after it: the registry
    is process-wide, and one test's secret must not change another's log lines."""
    monkeypatch.setattr(redaction, "_known", redaction._known)


@pytest.fixture
def now() -> datetime:
    return datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def store(data_dir: Path) -> AsyncIterator[db.Store]:
    opened = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for sources, providers and dispatchers under test: the engine's own
    kind, which judges the address each connection dials, on a network that reaches
    loopback only and a resolver that asks no DNS server (tests.fakes.network)."""
    async with httpclient.fetching(resolve=network.resolve, network=network.Network()) as http:
        yield http
