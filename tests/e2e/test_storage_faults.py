"""A store that cannot write is loud: the writer keeps the fault in memory, the operators
are told straight through the bot (no outbox row: the store could not hold one), status
and health say so, and the store recovers by itself once there is room again.

A full store is made with `PRAGMA max_page_count` on the writer's own connection (a
per-connection setting); an I/O error with RLIMIT_FSIZE, which makes the kernel refuse
to grow the WAL (SQLITE_IOERR_WRITE)."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot import app
from bot import settings as settings_mod
from bot.demo.botapi import localapi
from bot.ground import storage_alarm
from pipelines.service import runtime as runtime_mod
from store import db, errors, items
from store.backends import writer
from store.reports import info

TOKEN = "987654:storage-secret-token-value_ABCDEFGHIJ"
OPERATOR = 1001
#: A second operator, whose chat has blocked the bot in the end-to-end test.
BLOCKED = 1002
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
#: SQLite's largest page limit: "no limit" again.
NO_LIMIT = 1073741823
BIG = "x" * 40_000

PIPELINE = """\
name: news
schedule: manual
sources:
  - type: folder
    path: {notes}
dispatch:
  type: none
"""


async def set_page_limit(store: db.Store, pages: int | None) -> None:
    """Cap the writer's connection at `pages` (None: its current size) or lift the cap.

    Run on the writer's queue outside any transaction, so it is not itself a write
    (a commit would end the fault this test is about)."""

    def unit(conn: sqlite3.Connection) -> None:
        limit = pages or conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={limit}")

    await store._writer.submit(unit, transactional=False)


async def rows(store: db.Store) -> dict[str, int]:
    return (await info.info(store)).rows


# -- the writer's record ----------------------------------------------------------------


async def test_a_full_store_is_recorded_in_memory_and_clears_when_room_returns(
    store: db.Store,
) -> None:
    before = await rows(store)
    await set_page_limit(store, None)
    with pytest.raises(errors.StorageFull):
        await store.write(items.create_sync, "news", "notes", "a", {"title": "A", "text": BIG}, NOW)
    fault = store.faults.current
    assert fault is not None and fault.kind == "full" and "full" in fault.detail
    assert store.faults.count == 1 and store.faults.last == fault
    assert await rows(store) == before  # rolled back whole: no item, no event

    with pytest.raises(errors.StorageFull):  # still full: the same fault, counted again
        await store.write(items.create_sync, "news", "notes", "b", {"title": "B", "text": BIG}, NOW)
    assert store.faults.current is not None and store.faults.current.since == fault.since
    assert store.faults.count == 2

    await set_page_limit(store, NO_LIMIT)
    created = await store.write(
        items.create_sync, "news", "notes", "a", {"title": "A", "text": BIG}, NOW
    )
    assert created is not None
    # A write that fits proves nothing about room: only a measure of the room ends it.
    assert store.faults.current is not None
    assert await store.measure_room() >= writer.ROOM_BYTES
    assert store.faults.current is None and store.faults.last is not None


async def test_full_lasts_until_there_is_room_even_when_small_writes_fit(
    store: db.Store,
) -> None:
    for attempt in range(2):  # a second fault, after room was freed once, lasts as well
        await set_page_limit(store, None)
        with pytest.raises(errors.StorageFull):
            await store.write(items.create_sync, "news", "n", f"{attempt}", {"t": BIG}, NOW)
        # Small writes still fit into free space inside the pages already there.
        await store.write(items.create_sync, "news", "n", f"small-{attempt}", {"t": "x"}, NOW)
        assert await store.measure_room() < writer.ROOM_BYTES
        assert store.faults.current is not None and store.faults.current.kind == "full"
        await set_page_limit(store, NO_LIMIT)
        assert await store.measure_room() >= writer.ROOM_BYTES
        assert store.faults.current is None


@pytest.fixture
def file_size_limit() -> Iterator[None]:
    """Let a write past RLIMIT_FSIZE fail with EFBIG instead of killing the process."""
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


async def test_an_io_error_is_recorded_and_clears_after(
    store: db.Store, file_size_limit: None
) -> None:
    await store.checkpoint("TRUNCATE")
    before = await rows(store)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # The WAL is empty after TRUNCATE; the item's 40 KB cannot go past 16 KiB of it.
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, hard))
    try:
        with pytest.raises(errors.StorageIOError):
            await store.write(
                items.create_sync, "news", "notes", "a", {"title": "A", "text": BIG}, NOW
            )
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    fault = store.faults.current
    assert fault is not None and fault.kind == "io" and "I/O" in fault.detail
    assert await rows(store) == before
    # The next write that commits ends an I/O fault: the disk writes again.
    assert (
        await store.write(items.create_sync, "news", "notes", "a", {"title": "A"}, NOW) is not None
    )
    assert store.faults.current is None


def test_sqlite_io_errors_translate_to_storage_io_error() -> None:
    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorcode = 778  # SQLITE_IOERR_WRITE: an extended code of SQLITE_IOERR
    assert isinstance(errors.translate(exc), errors.StorageIOError)


# -- what is told, and how often ----------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def fault(kind: str = "full") -> errors.StoreError:
    return errors.StorageFull("full") if kind == "full" else errors.StorageIOError("io")


def test_one_alert_per_kind_an_hour_and_one_recovery_message() -> None:
    faults, clock = writer.StorageFaults(), Clock()
    alarm = storage_alarm.Alarm(faults, clock)
    assert alarm.due() is None
    faults.failed(fault())
    text = alarm.due()
    assert text is not None and text.startswith("🚨 storage full since ")
    alarm.sent(text)
    faults.failed(fault())
    clock.t += storage_alarm.REPEAT_S - 1
    assert alarm.due() is None  # still full, told less than an hour ago
    faults.failed(fault("io"))
    io_text = alarm.due()  # another kind is news
    assert io_text is not None and "storage I/O error" in io_text
    alarm.sent(io_text)
    faults.failed(fault())
    clock.t += 1
    again = alarm.due()  # full again, an hour after it was told
    assert again is not None and again.startswith("🚨 storage full since ")
    alarm.sent(again)
    faults.measured(writer.ROOM_BYTES)
    assert alarm.due() == storage_alarm.RECOVERED_TEXT
    alarm.sent(storage_alarm.RECOVERED_TEXT)
    assert alarm.due() is None


def test_a_fault_cleared_before_the_look_is_still_told() -> None:
    faults = writer.StorageFaults()
    alarm = storage_alarm.Alarm(faults, Clock())
    faults.failed(fault())
    faults.measured(writer.ROOM_BYTES)  # room again before the alarm looked
    text = alarm.due()
    assert text is not None and "storage full" in text
    alarm.sent(text)
    assert alarm.due() == storage_alarm.RECOVERED_TEXT


def test_a_repeat_within_the_hour_that_is_gone_is_not_told_later() -> None:
    faults, clock = writer.StorageFaults(), Clock()
    alarm = storage_alarm.Alarm(faults, clock)
    faults.failed(fault())
    alarm.sent(alarm.due() or "")
    faults.measured(writer.ROOM_BYTES)
    assert alarm.due() == storage_alarm.RECOVERED_TEXT
    alarm.sent(storage_alarm.RECOVERED_TEXT)
    faults.failed(fault())  # full for a moment, ten minutes later
    faults.measured(writer.ROOM_BYTES)
    clock.t += 600
    assert alarm.due() is None
    clock.t += storage_alarm.REPEAT_S
    assert alarm.due() is None  # over and already absorbed as a repeat


def test_other_store_errors_are_not_storage_faults() -> None:
    faults = writer.StorageFaults()
    faults.failed(errors.Busy())
    faults.failed(errors.ConstraintViolation())
    assert faults.current is None and faults.count == 0


# -- the running bot ----------------------------------------------------------------------


@dataclass
class Running:
    runtime: runtime_mod.Runtime
    api: localapi.LocalBotApi
    data_dir: Path
    pipelines_dir: Path
    notes: Path


@pytest.fixture
async def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Running]:
    monkeypatch.setattr(storage_alarm, "CHECK_EVERY_S", 0.2)
    notes, pipelines_dir, data_dir = tmp_path / "notes", tmp_path / "pipelines", tmp_path / "data"
    notes.mkdir()
    pipelines_dir.mkdir()
    (pipelines_dir / "news.yaml").write_text(PIPELINE.format(notes=notes))
    with localapi.LocalBotApi(token=TOKEN) as api:
        telegram = settings_mod.TelegramSettings(
            token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
            base_url=api.base_url,
            operators=[BLOCKED, OPERATOR],
            rate_limit_per_minute=0,
        )
        cfg = settings_mod.Settings(
            data_dir=data_dir, pipelines_dir=pipelines_dir, telegram=telegram
        )
        application = app.build(cfg, TOKEN)
        runtime = await runtime_mod.Runtime.start(app.runtime_config(cfg, application))
        stop = asyncio.Event()
        serving = asyncio.create_task(app.serve(cfg, TOKEN, runtime, stop, application))
        try:
            await api.await_for(lambda: api.calls("getUpdates"), timeout=20)
            yield Running(runtime, api, data_dir, pipelines_dir, notes)
        finally:
            stop.set()
            await serving
            await runtime.stop()


async def gatehouse(r: Running, *args: str) -> tuple[int, str]:
    """The CLI in a subprocess, without blocking the loop the bot runs in."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")},
        "GATEHOUSE_DATA_DIR": str(r.data_dir),
        "GATEHOUSE_PIPELINES_DIR": str(r.pipelines_dir),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args, env=environ,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


def told(r: Running, words: str, chat: int = OPERATOR) -> list[localapi.localapi_state.ChatMessage]:
    return [m for m in r.api.sent(chat) if words in m.text]


async def outbox_rows(store: db.Store) -> list[tuple[str, str]]:
    def query(conn: sqlite3.Connection) -> list[tuple[str, str]]:
        return list(conn.execute("SELECT kind, payload FROM outbox ORDER BY id"))

    return await store.read(query)


async def test_a_full_store_alerts_without_a_write_fails_health_and_recovers(
    running: Running,
) -> None:
    store = running.runtime.store
    # The runtime's own clock: a run opened at a fixed time would have lapsed already, and
    # the leader's run-recovery sweep (every lease TTL, real time) could close it mid-tick.
    now = running.runtime.now()
    for n in range(3):
        (running.notes / f"note-{n}.md").write_text(f"# Note {n}\n\n{BIG}\n")
    await set_page_limit(store, None)
    outbox_before = await outbox_rows(store)

    # The first operator has blocked the bot: the other still hears it, and only once.
    running.api.fail_next("sendMessage", 403, description="Forbidden: bot was blocked by the user")
    # Real engine work meets the full store.
    with pytest.raises(errors.StorageFull):
        await running.runtime.engine.tick("news", "manual", now)
    alert = await running.api.await_for(lambda: told(running, "storage full"), timeout=30)
    assert len(alert) == 1 and "Free space" in alert[0].text
    # Told straight through the bot: the outbox holds nothing new, and no alert row.
    assert await outbox_rows(store) == outbox_before

    code, out = await gatehouse(running, "health")
    assert code == 1 and f"process {os.getpid()} runs, but storage full since" in out
    code, out = await gatehouse(running, "status")
    assert code == 0 and "disk    storage full since" in out
    running.api.inject_command(OPERATOR, OPERATOR, "/status")
    await running.api.await_for(lambda: told(running, "\n🚨 storage full since"), timeout=10)

    # More failures while full: still one alert (at most one an hour). The run the first
    # failure cut short may be asked for again meanwhile, and meet the full store itself.
    with pytest.raises((errors.StorageFull, errors.Conflict)):
        await running.runtime.engine.tick("news", "manual", now)
    await asyncio.sleep(1)
    assert len(told(running, "gatehouse cannot write")) == 1
    assert told(running, "gatehouse cannot write", BLOCKED) == []

    # Room again: the alarm's look at the room notices, with nothing else writing.
    await set_page_limit(store, NO_LIMIT)
    await running.api.await_for(lambda: told(running, "storage writes succeed again"), timeout=30)
    assert store.faults.current is None
    code, out = await gatehouse(running, "health")
    assert code == 0 and out.startswith("ok: gatehouse runs as pid")
    # The run the fault cut short is asked for again by itself: the notes arrive.
    await wait_for_items(store, "news", 3)


async def wait_for_items(store: db.Store, pipeline: str, count: int) -> None:
    def query(conn: sqlite3.Connection) -> int:
        found: int = conn.execute(
            "SELECT count(*) FROM items WHERE pipeline = ?", (pipeline,)
        ).fetchone()[0]
        return found

    deadline = asyncio.get_running_loop().time() + 30
    while (found := await store.read(query)) < count:
        assert asyncio.get_running_loop().time() < deadline, f"{found} of {count} items"
        await asyncio.sleep(0.1)
    assert found == count
