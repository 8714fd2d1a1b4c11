"""Supervised workers: a crash is logged at once, reported once, survived; health and
/status name a worker that is not running. Real store, real control socket, real CLI."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from bot.chat import render
from bot.process import control
from pipelines import operations
from pipelines.ground import retry, waiting
from pipelines.service import runtime as runtime_mod
from pipelines.service import workers
from store import db, errors, outbox
from tests.bot.test_cli import gatehouse

#: How many 10 ms looks a test takes before it gives up waiting.
POLLS = 1000


async def eventually(check: Callable[[], bool]) -> None:
    for _ in range(POLLS):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the condition never held")


def fault_alerts(rows: list[outbox.Row]) -> list[outbox.Row]:
    return [r for r in rows if (r.dedupe_key or "").startswith("worker-fault:")]


async def test_a_crash_is_logged_at_once_reported_once_and_survived(
    store: db.Store, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    registry = workers.Registry(store, lambda: now, first_backoff_s=0.01)
    stop = asyncio.Event()
    runs: list[int] = []

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) <= 3:  # three crashes of the same kind, then it works
            raise ValueError(f"bad answer number {len(runs)}")
        await stop.wait()

    task = registry.spawn("flaky", flaky, stop)
    await eventually(lambda: len(runs) == 4)
    [state] = registry.snapshot()
    assert (state.name, state.status, state.restarts) == ("flaky", "running", 3)
    assert state.error == "ValueError: bad answer number 3"
    crashes = [r for r in caplog.records if r.name == "pipelines.service.workers" and r.exc_info]
    assert len(crashes) == 3 and all(r.levelno == logging.ERROR for r in crashes)
    assert "worker flaky crashed" in crashes[0].getMessage()
    # Told once, though it crashed three times.
    [alert] = fault_alerts(await outbox.due(store, now, ["alert"]))
    assert alert.payload["text"] == (
        "⚠️ flaky: unexpected ValueError. It keeps going; details in the log."
    )
    stop.set()
    await task
    assert registry.snapshot()[0].status == "stopped"


async def test_a_store_fault_in_a_worker_is_one_quiet_line_per_crash_and_no_alert(
    store: db.Store, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    """The store logs a full disk once per episode and the storage alarm tells the
    operators: a worker meeting it again and again adds no traceback and no alert."""
    caplog.set_level(logging.INFO)
    registry = workers.Registry(store, lambda: now, first_backoff_s=0.01)
    stop = asyncio.Event()
    runs: list[int] = []

    async def full() -> None:
        runs.append(len(runs))
        if len(runs) <= 3:
            raise errors.StorageFull()
        await stop.wait()

    task = registry.spawn("sender", full, stop)
    await eventually(lambda: len(runs) == 4)
    assert registry.snapshot()[0].restarts == 3
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    waits = [r.getMessage() for r in caplog.records if r.name == "pipelines.service.workers"]
    assert waits == ["worker sender waits for the store: " + str(errors.StorageFull())] * 3
    assert fault_alerts(await outbox.due(store, now, ["alert"])) == []
    stop.set()
    await task


async def test_a_worker_that_ends_is_reported_as_not_running(
    store: db.Store, now: datetime
) -> None:
    registry = workers.Registry(store, lambda: now)
    stop = asyncio.Event()

    async def quits() -> None:
        return

    await registry.spawn("quitter", quits, stop)
    registry.spawn("steady", stop.wait, stop)
    await asyncio.sleep(0)
    assert [(s.name, s.status) for s in workers.down(registry.snapshot())] == [
        ("quitter", "stopped")
    ]
    stop.set()


async def test_a_report_that_cannot_be_stored_is_logged_and_tried_again(
    data_dir: Path, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    registry = workers.Registry(store, lambda: now)
    await store.close()  # the store is gone: the alert cannot be queued
    await registry.report("dispatcher", KeyError("x"))
    assert "could not queue the alert about dispatcher" in caplog.text
    reopened = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        assert fault_alerts(await outbox.due(reopened, now, ["alert"])) == []
    finally:
        await reopened.close()


def test_backoff_doubles_and_is_capped() -> None:
    first, cap = workers.FIRST_BACKOFF_S, workers.MAX_BACKOFF_S
    assert [retry.backoff_s(n, first, cap) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert retry.backoff_s(50, first, cap) == cap
    assert retry.backoff_s(10**6, first, cap) == cap  # no overflow far past the cap


def test_describe_shortens_long_messages() -> None:
    assert waiting.describe(ValueError("x" * 1000)).endswith("…")
    assert len(waiting.describe(ValueError("x" * 1000))) == waiting.MAX_ERROR_CHARS
    assert waiting.describe(KeyError()) == "KeyError"


#: An error message may quote a Bot API URL, whose path holds the bot token.
SECRET_URL = "http://127.0.0.1/bot123456:ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef12345/getMe"


async def broken_worker(runtime: runtime_mod.Runtime, stop: asyncio.Event) -> None:
    """A worker with a bug: it crashes every time it starts."""
    raise RuntimeError(f"the worker bug at {SECRET_URL}")


async def test_health_and_status_name_a_worker_that_is_not_running(
    tmp_path: Path, data_dir: Path, now: datetime
) -> None:
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    cfg = runtime_mod.RuntimeConfig(
        store=db.StoreConfig(data_dir=data_dir),
        pipelines_dir=pipelines_dir,
        clock=lambda: now,
        first_backoff_s=60,  # it stays down for the length of the test
        workers=(control.serve, broken_worker),
    )
    rt = await runtime_mod.Runtime.start(cfg)
    try:
        await eventually(lambda: control.socket_path(data_dir).exists())
        await eventually(lambda: bool(workers.down(rt.workers.snapshot())))
        [down] = workers.down(rt.workers.snapshot())
        assert (down.name, down.status) == ("test_workers", "restarting")

        code, out, err = await gatehouse(data_dir, pipelines_dir, "health", "--json")
        answer = json.loads(out)
        assert code == 1, err
        assert answer["problem"] == (
            "workers not running: test_workers restarting "
            "(RuntimeError: the worker bug at http://127.0.0.1/bot<redacted>/getMe)"
        )
        assert [w["name"] for w in answer["workers_down"]] == ["test_workers"]

        overview = await operations.overview(rt.store, rt.pipelines, now, rt.workers.snapshot())
        text = render.status_overview(overview)
        assert "⚠️ 1 of 9 workers not running:" in text
        assert "test_workers restarting since 0 s ago: RuntimeError: the worker bug at" in text
        assert "ABCDEFGHIJ" not in text and "ABCDEFGHIJ" not in out
    finally:
        await rt.stop()


async def test_health_is_ok_while_every_worker_runs(
    tmp_path: Path, data_dir: Path, now: datetime
) -> None:
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    cfg = runtime_mod.RuntimeConfig(
        store=db.StoreConfig(data_dir=data_dir),
        pipelines_dir=pipelines_dir,
        clock=lambda: now,
        workers=(control.serve,),
    )
    rt = await runtime_mod.Runtime.start(cfg)
    try:
        await eventually(lambda: control.socket_path(data_dir).exists())
        code, out, err = await gatehouse(data_dir, pipelines_dir, "health", "--json")
        assert code == 0 and json.loads(out)["workers_down"] == [], (out, err)
        names = [s.name for s in rt.workers.snapshot()]
        assert names == [
            "claim-recovery",
            "control",
            "heartbeat",
            "retention",
            "run-recovery",
            "scheduler",
            "sealer",
            "sla-sweep",
        ]
        overview = await operations.overview(rt.store, rt.pipelines, now, rt.workers.snapshot())
        assert render.status_overview(overview).endswith("workers: all 8 running")
    finally:
        await rt.stop()
