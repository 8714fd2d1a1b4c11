"""Shared fixtures: a real store in a private temporary data directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from store import db


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
    """An HTTP client for sources, providers and dispatchers under test."""
    async with httpx.AsyncClient() as http:
        yield http
