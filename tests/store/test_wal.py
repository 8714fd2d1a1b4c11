"""The WAL stays bounded under steady writes; checkpoints never run on the writer's connection."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from store import db, errors
from store.backends import sqlite_store

BOUND = 4 * 1024 * 1024


@pytest.fixture
async def small_wal(data_dir: Path) -> db.Store:
    config = db.StoreConfig(data_dir=data_dir, wal_max_bytes=BOUND, checkpoint_every_s=0.01)
    opened = await db.open(config)
    await opened.write(lambda c: c.execute("CREATE TABLE t (n INTEGER, x BLOB)"))
    return opened


async def test_the_writer_runs_with_the_bound_as_its_journal_size_limit(data_dir: Path) -> None:
    config = db.StoreConfig(data_dir=data_dir, wal_max_bytes=3 * 1024 * 1024)
    store = await db.open(config)
    try:
        pragmas = await store.write(
            lambda c: [
                c.execute(f"PRAGMA {name}").fetchone()[0]
                for name in ("journal_size_limit", "wal_autocheckpoint")
            ]
        )
        assert pragmas == [3 * 1024 * 1024, 0]
        assert sqlite_store.required_pragmas(config)["journal_size_limit"] == 3 * 1024 * 1024
    finally:
        await store.close()


def test_a_wrong_journal_size_limit_stops_startup(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db")
    conn.execute("PRAGMA journal_size_limit=5")
    with pytest.raises(errors.PragmaMismatch, match="journal_size_limit is 5, expected 1024"):
        sqlite_store.check_pragmas(conn, {"journal_size_limit": 1024})


async def test_steady_writes_keep_the_wal_under_its_bound(small_wal: db.Store) -> None:
    store = small_wal
    checkpoints_on_writer: list[str] = []
    await store.write(
        lambda c: c.set_trace_callback(
            lambda s: checkpoints_on_writer.append(s) if "checkpoint" in s.lower() else None
        )
    )
    peak = 0
    stop = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, store.wal_bytes())
            await asyncio.sleep(0.002)

    async def writer(k: int) -> None:
        for n in range(200):  # each commit adds a few 4 KiB pages
            await store.write(
                lambda c, n=n: c.execute(
                    "INSERT INTO t VALUES (?, randomblob(6000))", (k * 1000 + n,)
                )
            )

    sampler = asyncio.create_task(sample())
    try:
        # About 12 MiB of WAL frames in all: three times the bound.
        await asyncio.gather(*(writer(k) for k in range(8)))
    finally:
        stop.set()
        await sampler
    try:
        rows = await store.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0])
        assert rows == 8 * 200
        assert store.checkpoint_stats.held >= 1, "the WAL never needed starting over"
        assert 0 < peak <= BOUND, f"the WAL reached {peak} bytes"
        assert store.checkpoint_stats.peak_wal_bytes <= BOUND
        assert checkpoints_on_writer == []
    finally:
        await store.close()


async def test_a_restart_lets_the_next_write_start_the_wal_over(data_dir: Path) -> None:
    # The background checkpointer stays out of the way: this test checkpoints by hand.
    store = await db.open(db.StoreConfig(data_dir=data_dir, checkpoint_every_s=3600))
    try:
        await store.write(lambda c: c.execute("CREATE TABLE t (n INTEGER, x BLOB)"))
        for n in range(50):
            await store.write(
                lambda c, n=n: c.execute("INSERT INTO t VALUES (?, zeroblob(5000))", (n,))
            )
        size = store.wal_bytes()
        busy, frames, copied = await store.checkpoint("RESTART")
        assert busy == 0 and frames == copied >= 50
        await store.write(lambda c: c.execute("INSERT INTO t VALUES (99, NULL)"))
        # The write went to the start of the file: the WAL holds a frame or two, in the
        # same file (reused, not grown).
        _, frames_after, _ = await store.checkpoint("PASSIVE")
        assert 1 <= frames_after <= 3
        assert store.wal_bytes() == size
        assert store.checkpoint_stats.held == 1
    finally:
        await store.close()


async def test_a_truncate_gives_up_on_a_reader_instead_of_holding_the_writer(
    small_wal: db.Store,
) -> None:
    store = small_wal
    try:
        await store.write(lambda c: c.execute("INSERT INTO t VALUES (1, randomblob(9000))"))

        def hold_snapshot(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM t").fetchone()

        readers = store.config.readers
        for _ in range(readers):  # every reader holds a snapshot that needs the WAL
            await store.read(hold_snapshot)
        await store.write(lambda c: c.execute("INSERT INTO t VALUES (2, randomblob(9000))"))
        busy, _, _ = await store.checkpoint("TRUNCATE")
        assert busy == 1
        # The writer was handed back: it commits at once.
        await store.write(lambda c: c.execute("INSERT INTO t VALUES (3, NULL)"))
        for _ in range(readers):
            await store.read(lambda c: c.execute("COMMIT"))
        busy, frames, copied = await store.checkpoint("TRUNCATE")
        assert (busy, frames, copied) == (0, 0, 0) and store.wal_bytes() == 0
        assert await store.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 3
    finally:
        await store.close()
