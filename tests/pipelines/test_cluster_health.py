"""Two workers on one PostgreSQL store: the follower's leader-only workers stand by,
and that is well. `gatehouse health` exits 0 on both, /status says nothing is down and
`gatehouse_worker_running` is 1 for every worker, on both. Real CLI, real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from prometheus_client import parser

from bot.chat import render
from bot.process import control
from bot.web import metrics
from pipelines import operations
from pipelines.service import runtime as runtime_mod
from store import db
from store.backends import datadir
from tests import pg_databases
from tests.bot.test_api import free_port
from tests.bot.test_cli import env

#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 30.0


@pytest.fixture
def database() -> Iterator[str]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_pgscale_health_{os.getpid()}"
    server.drop(name)
    try:
        yield server.create(name)
    finally:
        server.drop(name)


async def eventually(check: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WITHIN_S
    while loop.time() < deadline:
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition never held")


@pytest.fixture
async def two_workers(
    tmp_path: Path, database: str
) -> AsyncIterator[list[tuple[runtime_mod.Runtime, Path, str]]]:
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    started: list[tuple[runtime_mod.Runtime, Path, str]] = []
    try:
        for n in range(2):
            data_dir = tmp_path / f"worker{n}"
            datadir.claim(data_dir)  # as `python -m bot` does before it opens the store
            address = f"127.0.0.1:{free_port()}"
            cfg = runtime_mod.RuntimeConfig(
                store=db.StoreConfig(data_dir=data_dir, database_url=database),
                pipelines_dir=pipelines_dir,
                workers=(control.serve, metrics.worker(address)),
            )
            started.append((await runtime_mod.Runtime.start(cfg), data_dir, address))
        yield started
    finally:
        for runtime, _, _ in started:
            await runtime.stop()


async def health(data_dir: Path, database: str) -> tuple[int, dict[str, object], str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "health", "--json",
        cwd=data_dir.parent,
        env={**env(data_dir, data_dir.parent / "pipelines"), "GATEHOUSE_DATABASE_URL": database},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, json.loads(out), err.decode()


async def worker_running(address: str) -> dict[str, float]:
    async with httpx.AsyncClient() as client:
        for _ in range(500):  # the listener binds on its worker's first turn
            try:
                text = (await client.get(f"http://{address}/metrics")).text
                break
            except httpx.ConnectError:
                await asyncio.sleep(0.02)
    return {
        sample.labels["worker"]: sample.value
        for family in parser.text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gatehouse_worker_running"
    }


async def test_a_follower_on_standby_is_healthy_in_health_status_and_metrics(
    two_workers: list[tuple[runtime_mod.Runtime, Path, str]], database: str, now: datetime
) -> None:
    (leader, leader_dir, leader_at), (follower, follower_dir, follower_at) = two_workers
    assert leader.leader.leading and not follower.leader.leading
    standing_by = [s.name for s in follower.workers.snapshot() if s.status == "standby"]
    assert "sealer" in standing_by and "claim-recovery" in standing_by
    for data_dir in (leader_dir, follower_dir):
        await eventually(control.socket_path(data_dir).exists)

    for data_dir in (leader_dir, follower_dir):
        code, answer, err = await health(data_dir, database)
        assert code == 0, (answer, err)
        assert answer["ok"] is True and answer["workers_down"] == []

    for runtime in (leader, follower):
        overview = await operations.overview(
            runtime.store, runtime.pipelines, now, runtime.workers.snapshot()
        )
        assert overview.workers_down == []
        text = render.status_overview(overview)
        assert "not running" not in text
        assert ("on standby: another worker leads" in text) is (runtime is follower), text

    for runtime, address in ((leader, leader_at), (follower, follower_at)):
        running = await worker_running(address)
        assert set(running) == {s.name for s in runtime.workers.snapshot()}
        assert all(value == 1 for value in running.values()), running
