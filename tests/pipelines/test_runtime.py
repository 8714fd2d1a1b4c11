"""The runtime starts the engine's parts together and stops them together."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from bot.chat import alerts as bot_alerts
from pipelines.service import runtime
from pipelines.sources import articles
from store import db, errors, items, ledger, outbox
from store.backends import datadir
from store.intake import runs
from store.items.machine import State
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss


@pytest.mark.parametrize(
    "bad",
    [
        "name: bad\nschedule: sometimes\nsources: []\ndispatch:\n  type: none\n",
        "name: bad\x07\nschedule: 5m\n",  # a stray control character: PyYAML's reader refuses it
    ],
    ids=["invalid-fields", "control-character"],
)
async def test_runtime_runs_due_pipelines_and_reports_bad_files(
    tmp_path: Path, now: datetime, bad: str
) -> None:
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    with FeedServer() as feeds:
        feeds.set("/feed.xml", rss([("a", "Alpha", "story")]))
        (pipelines_dir / "good.yaml").write_text(
            "name: good\nschedule: 5m\nsources:\n  - type: rss\n"
            f"    url: {feeds.url('/feed.xml')}\ndispatch:\n  type: none\n"
        )
        (pipelines_dir / "bad.yaml").write_text(bad)
        cfg = runtime.RuntimeConfig(
            store=db.StoreConfig(data_dir=tmp_path / "data"),
            pipelines_dir=pipelines_dir,
            clock=lambda: now,
        )
        rt = await runtime.Runtime.start(cfg)
        try:
            assert list(rt.pipelines) == ["good"]
            for _ in range(100):
                if await items.in_state(rt.store, State.AWAITING_APPROVAL, "good"):
                    break
                await asyncio.sleep(0.05)
            assert len(await items.in_state(rt.store, State.AWAITING_APPROVAL, "good")) == 1
            alerts = await outbox.due(rt.store, now, ["alert"])
            assert any("bad.yaml" in bot_alerts.row_text(a) for a in alerts)
        finally:
            await rt.stop()
    assert datadir.is_locked(tmp_path / "data") is None
    reopened = await db.open(db.StoreConfig(data_dir=tmp_path / "data"), readonly=True)
    try:
        assert (await runs.recent_runs(reopened, "good"))[0].status == "ok"
    finally:
        await reopened.close()


async def test_runtime_makes_a_crashed_calls_claim_uncertain_and_says_so(
    tmp_path: Path, now: datetime
) -> None:
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    config = db.StoreConfig(data_dir=tmp_path / "data")
    # A previous process started a paid call and died before complete().
    store = await db.open(config)
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000_000), "cli", now)
    work = await ledger.begin(
        store, ledger.Call("k", "chat", {"p": 1}, 10_000, "news", None, timedelta(minutes=1)), now
    )
    await ledger.start_provider(store, work.id, now)
    await store.close()

    later = now + timedelta(minutes=5)
    cfg = runtime.RuntimeConfig(store=config, pipelines_dir=pipelines_dir, clock=lambda: later)
    rt = await runtime.Runtime.start(cfg)
    try:
        for _ in range(100):
            if (await ledger.get(rt.store, work.id)).state == "uncertain":
                break
            await asyncio.sleep(0.05)
        assert (await ledger.get(rt.store, work.id)).state == "uncertain"
        alerts = await outbox.due(rt.store, later, ["alert"])
        assert any("1 call was cut off" in bot_alerts.row_text(a) for a in alerts)
    finally:
        await rt.stop()


async def test_a_failed_start_releases_the_store(tmp_path: Path, now: datetime) -> None:
    """Startup recovery meets a broken store: start raises, and the writer lock is free again."""
    config = db.StoreConfig(data_dir=tmp_path / "data")
    (tmp_path / "pipelines").mkdir()
    store = await db.open(config)
    await store.close()
    raw = sqlite3.connect(tmp_path / "data" / "gatehouse.db", isolation_level=None)
    raw.execute("ALTER TABLE pipeline_runs RENAME TO pipeline_runs_moved")
    raw.close()
    cfg = runtime.RuntimeConfig(store=config, pipelines_dir=tmp_path / "pipelines")
    with pytest.raises(errors.StoreError, match="no such table: pipeline_runs"):
        await runtime.Runtime.start(cfg)
    assert datadir.is_locked(tmp_path / "data") is None
    raw = sqlite3.connect(tmp_path / "data" / "gatehouse.db", isolation_level=None)
    raw.execute("ALTER TABLE pipeline_runs_moved RENAME TO pipeline_runs")
    raw.close()
    started = await runtime.Runtime.start(cfg)  # the next start finds the store free
    await started.stop()


async def test_a_crashing_worker_and_a_failing_sweep_are_logged_and_the_rest_runs_on(
    tmp_path: Path, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "pipelines").mkdir()
    survived: list[str] = []

    async def crashing(rt: runtime.Runtime, stopping: asyncio.Event) -> None:
        raise RuntimeError("worker broke")

    async def steady(rt: runtime.Runtime, stopping: asyncio.Event) -> None:
        await stopping.wait()
        survived.append("steady")

    cfg = runtime.RuntimeConfig(
        store=db.StoreConfig(data_dir=tmp_path / "data"),
        pipelines_dir=tmp_path / "pipelines",
        clock=lambda: now,
        workers=(crashing, steady),
        sweep_every_s=0.02,
    )
    rt = await runtime.Runtime.start(cfg)
    try:
        # Claims vanish behind the program's back: claim recovery fails on every pass.
        await rt.store.write(lambda c: c.execute("ALTER TABLE claims RENAME TO claims_moved"))
        for _ in range(200):
            if any(m.startswith("claim-recovery failed") for m in caplog.messages):
                break
            await asyncio.sleep(0.02)
        await rt.store.write(lambda c: c.execute("ALTER TABLE claims_moved RENAME TO claims"))
    finally:
        await rt.stop()
    # Workers are named for their module: the crashing one is this test module's first.
    assert "worker test_runtime crashed; starting it again in 1 s" in caplog.messages
    assert "claim-recovery failed; trying again in 0.02 s" in caplog.messages
    assert survived == ["steady"]


@pytest.mark.parametrize("full_text", [True, False])
async def test_the_extractor_is_loaded_before_start_up_freezes_what_it_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, full_text: bool
) -> None:
    """Frozen, the extractor's tables are never walked again by a full collection, which
    holds the GIL (and so the event loop) throughout; a runtime without full text never
    loads it."""
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    (pipelines_dir / "news.yaml").write_text(
        "name: news\nschedule: 5m\nsources:\n  - type: rss\n    url: http://127.0.0.1:9/f\n"
        f"    full_text: {'true' if full_text else 'false'}\ndispatch:\n  type: none\n"
    )
    order: list[str] = []
    real_warm, real_freeze = articles.warm, gc.freeze

    async def warm() -> None:
        order.append("warm")
        await real_warm()

    def freeze() -> None:
        order.append("freeze")
        real_freeze()

    monkeypatch.setattr(articles, "warm", warm)
    monkeypatch.setattr(gc, "freeze", freeze)
    cfg = runtime.RuntimeConfig(
        store=db.StoreConfig(data_dir=tmp_path / "data"), pipelines_dir=pipelines_dir
    )
    started = await runtime.Runtime.start(cfg)
    await started.stop()
    assert order == (["warm", "freeze"] if full_text else ["freeze"])
