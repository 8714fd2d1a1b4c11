"""A failure that repeats is one episode in the log: its first line, one a minute, and
its end. Proved on the helper with chosen times, then on the real loops that retry every
few milliseconds: the SQLite checkpointer on a file that may not grow (RLIMIT_FSIZE, as
a full disk refuses the write), and the sealer on a store at its page limit (SQLITE_FULL)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pipelines.service import seal_loop
from store import db, episodes, items
from store.audit import events
from store.backends import datadir

LOGGER = "tests.episodes"
#: Page limit lifted again: SQLite's default.
NO_PAGE_LIMIT = 1073741823
#: Unsealed events enough that sealing them needs new pages.
EVENTS = 200


def test_a_repeated_failure_logs_once_then_once_a_minute_then_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    failures = episodes.Episode(logging.getLogger(LOGGER), "checkpoint failed", "checkpoints work")
    failures.worked()  # nothing was failing: nothing to say
    for tenth in range(600):  # a minute of failures, ten a second
        failures.failed(OSError("disk full"), tenth / 10)
    failures.failed(OSError("disk full"), 60.0)
    failures.failed(OSError("disk full"), 60.1)
    failures.worked()
    failures.worked()
    assert caplog.messages == [
        "checkpoint failed: disk full (while it lasts, one line a minute)",
        "checkpoint failed again: disk full (601 failures in a row, 600 since the last line)",
        "checkpoints work after 602 failures",
    ]
    caplog.clear()
    failures.failed(OSError("disk full"), 61.0)  # a new episode starts over
    failures.worked()
    assert caplog.messages == [
        "checkpoint failed: disk full (while it lasts, one line a minute)",
        "checkpoints work after 1 failure",
    ]


@contextlib.contextmanager
def files_may_not_grow_past(size: int) -> Iterator[None]:
    """A write past `size` bytes of any file fails (EFBIG), as a full disk's does (ENOSPC):
    SQLite answers both with an error, and the real checkpoint fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    before = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error, not the signal's kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, before)


async def until(check: object, what: str) -> None:
    for _ in range(3000):  # a bound, not a speed: 30 s, for a machine busy with other work
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_a_checkpoint_that_keeps_failing_logs_once_and_once_more_when_it_works(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="store.backends.sqlite_store")
    config = db.StoreConfig(data_dir=data_dir, checkpoint_every_s=0.005, wal_max_bytes=1)
    store = await db.open(config)
    try:
        await store.write(lambda conn: conn.execute("CREATE TABLE t (x BLOB)"))
        await store.write(lambda conn: conn.execute("INSERT INTO t VALUES (zeroblob(1000000))"))
        await until(lambda: store.wal_bytes() == 0, "the idle WAL was truncated")
        size = data_dir.joinpath(datadir.DB_NAME).stat().st_size
        with files_may_not_grow_past(size):
            # The WAL starts over and takes the frames; copying them grows the database.
            await store.write(lambda conn: conn.execute("INSERT INTO t VALUES (zeroblob(300000))"))
            await until(lambda: "checkpoint failed" in caplog.text, "a checkpoint failed")
            await asyncio.sleep(0.5)  # a hundred passes, each failing
            assert store.wal_bytes() > 0
        await until(lambda: store.wal_bytes() == 0, "the checkpoints copied the WAL")
        await until(lambda: "checkpoints work again" in caplog.text, "the recovery's line")
    finally:
        await store.close()
    said = [r.getMessage() for r in caplog.records if "checkpoint" in r.getMessage()]
    assert len(said) == 2, said
    assert said[0].startswith("checkpoint failed: "), said
    failures = int(said[1].removeprefix("checkpoints work again after ").split()[0])
    assert failures > 10, said


async def test_a_sealer_failing_on_a_full_store_logs_once_a_minute_and_its_end(
    data_dir: Path, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pipelines.service.seal_loop")
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    clock = [now]
    stop = asyncio.Event()
    try:
        for n in range(EVENTS):
            await store.write(items.create_sync, "news", "feed", f"s{n}", {"n": n}, now)
        # Full: sealing the events (a place and a hash each) needs pages the store lacks.
        pages = await store.write(lambda conn: conn.execute("PRAGMA page_count").fetchone()[0])
        await store.write(lambda conn: conn.execute(f"PRAGMA max_page_count={pages}"))
        sealing = seal_loop.run(store, lambda: clock[0], 0.005, timedelta(seconds=1), stop)
        duty = asyncio.create_task(sealing)
        await until(lambda: "sealing pass failed" in caplog.text, "a sealing pass failed")
        await asyncio.sleep(0.5)  # many passes, each failing, within a minute
        clock[0] = now + timedelta(seconds=61)
        await until(lambda: "sealing pass failed again" in caplog.text, "the minute's line")
        await store.write(lambda conn: conn.execute(f"PRAGMA max_page_count={NO_PAGE_LIMIT}"))
        await until(lambda: "sealing passes work again" in caplog.text, "the recovery's line")
        stop.set()
        await duty
        assert (await events.verify_chain(store)).pending == 0
    finally:
        stop.set()
        await store.close()
    said = [m for m in caplog.messages if m.startswith("sealing pass")]
    assert len(said) == 3, said
    assert said[0].startswith("sealing pass failed: "), said
    assert said[1].startswith("sealing pass failed again: "), said
    assert said[2].startswith("sealing passes work again after "), said
