"""A runtime that fails to start leaves nothing running and nothing held: the store is
closed and unlocked, no worker or control socket started, and the failed write changed
nothing. The failures are real SQLite refusals, planted as triggers in the database."""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime
from pathlib import Path

import pytest

from bot.demo.botapi import localapi
from bot.process import control
from pipelines.service import runtime
from store import db, errors
from store.backends import datadir
from store.intake import runs
from store.reports import info

TOKEN = "987654:runtime-start-secret-token_ABCDEFGHIJ"
BAD_PIPELINE = "name: bad\nschedule: sometimes\nsources: []\ndispatch:\n  type: none\n"
#: Where each start-up write fails: the recovery of interrupted runs, and the alert
#: about rejected pipeline files.
PLANTED = {
    "recovery": "CREATE TRIGGER planted BEFORE UPDATE ON pipeline_runs "
    "BEGIN SELECT RAISE(ABORT, 'planted: runs are read-only'); END",
    "config-alert": "CREATE TRIGGER planted BEFORE INSERT ON outbox "
    "BEGIN SELECT RAISE(ABORT, 'planted: outbox is read-only'); END",
}


async def prepare(tmp_path: Path, now: datetime, failing: str) -> tuple[db.StoreConfig, Path]:
    """A store with an interrupted run, a bad pipeline file and one failing write."""
    config = db.StoreConfig(data_dir=tmp_path / "data")
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    (pipelines_dir / "bad.yaml").write_text(BAD_PIPELINE)
    store = await db.open(config)
    try:
        if failing == "config-alert":  # else recovery would be the first write to fail
            await store.write(lambda conn: conn.execute("DELETE FROM pipeline_runs"))
        else:
            await runs.start_run(store, "news", "schedule", now)
        await store.write(lambda conn: conn.execute(PLANTED[failing]))
    finally:
        await store.close()
    return config, pipelines_dir


async def snapshot(config: db.StoreConfig) -> tuple[dict[str, int], list[str]]:
    store = await db.open(config, readonly=True)
    try:
        statuses = [r.status for r in await runs.recent_runs(store, "news")]
        return (await info.info(store)).rows, statuses
    finally:
        await store.close()


@pytest.mark.parametrize("failing", list(PLANTED))
async def test_a_failed_start_closes_and_unlocks_the_store_and_changes_nothing(
    tmp_path: Path, now: datetime, failing: str
) -> None:
    config, pipelines_dir = await prepare(tmp_path, now, failing)
    before = await snapshot(config)
    cfg = runtime.RuntimeConfig(
        store=config, pipelines_dir=pipelines_dir, clock=lambda: now, workers=(control.serve,)
    )
    with pytest.raises(errors.ConstraintViolation, match="planted"):
        await runtime.Runtime.start(cfg)
    assert datadir.is_locked(config.data_dir) is None
    assert not control.socket_path(config.data_dir).exists()
    assert await snapshot(config) == before
    # The store is free for the next start: a writer opens it at once.
    again = await db.open(config)
    await again.close()


async def test_the_bot_says_a_failed_start_in_one_line(tmp_path: Path, now: datetime) -> None:
    config, pipelines_dir = await prepare(tmp_path, now, "recovery")
    with localapi.LocalBotApi(token=TOKEN) as api:
        env = {
            "PATH": "/usr/bin:/bin",
            "GATEHOUSE_TELEGRAM__TOKEN": TOKEN,
            "GATEHOUSE_TELEGRAM__BASE_URL": api.base_url,
            "GATEHOUSE_TELEGRAM__OPERATORS": "1001",
            "GATEHOUSE_DATA_DIR": str(config.data_dir),
            "GATEHOUSE_PIPELINES_DIR": str(pipelines_dir),
            "GATEHOUSE_LOG_LEVEL": "WARNING",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert err.decode().splitlines() == [
        "gatehouse: the store failed at startup: A write broke a database constraint; "
        "nothing was written. (planted: runs are read-only)"
    ]
    assert out == b"" and TOKEN.encode() not in err
    assert datadir.is_locked(config.data_dir) is None
