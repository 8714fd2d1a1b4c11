"""`gatehouse migrate-to-postgres` as an operator runs it: the URL from the settings,
the bot stopped, a summary at the end, the password nowhere in what it prints."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from store import db, items
from store.audit import sealer
from store.backends import datadir
from tests import pg_databases

PASSWORD = "pw-never-printed-4471"


@pytest.fixture
def empty_url() -> Iterator[str]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_pgscale_cli_{os.getpid()}"
    server.drop(name)
    try:
        url = server.create(name)
        # The local server trusts loopback, so any password works: it must still never show.
        yield url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")
    finally:
        server.drop(name)


def gatehouse(data_dir: Path, url: str | None, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env["GATEHOUSE_DATA_DIR"] = str(data_dir)
    if url is not None:
        env["GATEHOUSE_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "migrate-to-postgres", *argv],
        env=env,
        cwd=data_dir.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _fill(data_dir: Path, now: datetime) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        for n in range(5):
            await store.write(items.create_sync, "news", "feed", f"g{n}", {"title": f"t{n}"}, now)
        await sealer.seal(store)  # no leader runs here to seal them
    finally:
        await store.close()


def test_the_copy_reports_what_arrived_without_the_password(
    data_dir: Path, empty_url: str, now: datetime
) -> None:
    asyncio.run(_fill(data_dir, now))
    done = gatehouse(data_dir, empty_url)
    assert done.returncode == 0, done.stderr
    assert "audit chain verified on arrival: 5 events" in done.stdout
    assert "items: 5 rows" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    again = gatehouse(data_dir, empty_url)
    assert again.returncode == 2 and "copy only into an empty database" in again.stderr
    assert PASSWORD not in again.stdout + again.stderr


def test_without_a_database_url_it_says_what_to_set(data_dir: Path, now: datetime) -> None:
    asyncio.run(_fill(data_dir, now))
    done = gatehouse(data_dir, None)
    assert done.returncode == 2
    assert "set GATEHOUSE_DATABASE_URL to the empty PostgreSQL database" in done.stderr


def test_a_running_gatehouse_is_refused(data_dir: Path, empty_url: str, now: datetime) -> None:
    asyncio.run(_fill(data_dir, now))
    lock = datadir.WriterLock(data_dir)
    lock.acquire()  # as the running bot holds it
    try:
        done = gatehouse(data_dir, empty_url)
    finally:
        lock.release()
    assert done.returncode == 2
    assert f"gatehouse runs as pid {os.getpid()} on this store; stop it first" in done.stderr
