"""The connection owner: data directory, writer lock, pragmas, writer and readers."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from store import backend, db, errors
from store.backends import datadir, sqlite_store


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_creates_private_directory_and_files(data_dir: Path) -> None:
    previous = os.umask(0o022)  # a permissive process umask must not matter
    try:
        store = await db.open(db.StoreConfig(data_dir=data_dir))
        await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
        assert os.umask(0o022) == 0o022  # and the store leaves the process umask alone
        assert _mode(data_dir) == 0o700
        for name in ("gatehouse.db", "gatehouse.db-wal", "gatehouse.db-shm", "gatehouse.lock"):
            assert _mode(data_dir / name) == 0o600, name
        await store.close()
    finally:
        os.umask(previous)


@pytest.mark.sqlite_only  # the data directory's lock is SQLite's single writer
async def test_second_instance_in_process_is_refused(store: db.Store, data_dir: Path) -> None:
    with pytest.raises(errors.LockHeld) as caught:
        await db.open(db.StoreConfig(data_dir=data_dir))
    assert caught.value.pid == os.getpid()
    assert str(os.getpid()) in str(caught.value)


@pytest.mark.sqlite_only  # the data directory's lock is SQLite's single writer
async def test_second_process_exits_naming_the_holder(store: db.Store, data_dir: Path) -> None:
    script = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from store import db, errors\n"
        "try:\n"
        f"    asyncio.run(db.open(db.StoreConfig(data_dir=Path({str(data_dir)!r}))))\n"
        "except errors.LockHeld as exc:\n"
        "    print(exc); sys.exit(2)\n"
    )
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", script], capture_output=True, text=True, timeout=10
    )
    assert done.returncode == 2, done.stderr
    assert f"process {os.getpid()}" in done.stdout


async def test_lock_is_released_on_close(data_dir: Path) -> None:
    first = await db.open(db.StoreConfig(data_dir=data_dir))
    assert datadir.is_locked(data_dir) == os.getpid()
    await first.close()
    assert datadir.is_locked(data_dir) is None
    second = await db.open(db.StoreConfig(data_dir=data_dir))
    await second.close()


async def test_symlinked_data_dir_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(errors.DataDirError, match="symlink"):
        await db.open(db.StoreConfig(data_dir=link))
    assert not (real / "gatehouse.db").exists()


@pytest.mark.parametrize("mode", [0o750, 0o705, 0o770])
async def test_group_or_world_accessible_data_dir_is_refused(tmp_path: Path, mode: int) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(mode)
    with pytest.raises(errors.DataDirError, match=f"mode {mode:04o}"):
        await db.open(db.StoreConfig(data_dir=loose))
    assert not (loose / "gatehouse.db").exists()


@pytest.mark.parametrize("where", ["/", "/tmp", "/var/tmp", "~"])
def test_a_directory_not_gatehouses_own_is_refused_not_chmodded(where: str) -> None:
    path = Path(where).expanduser()
    before = path.stat().st_mode
    with pytest.raises(errors.DataDirError, match="a directory of its own") as caught:
        datadir.prepare(path)
    assert "chmod" not in str(caught.value)
    assert path.stat().st_mode == before


def test_an_empty_data_dir_is_an_error_not_the_working_directory() -> None:
    with pytest.raises(errors.DataDirError, match="empty"):
        datadir.parse("")


def test_pragma_mismatch_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "raw.db")
    conn.execute("PRAGMA synchronous=OFF")
    required = sqlite_store.required_pragmas(db.StoreConfig(data_dir=tmp_path))
    with pytest.raises(errors.PragmaMismatch) as caught:
        sqlite_store.check_pragmas(conn, required)
    message = str(caught.value)
    assert "journal_mode is 'delete', expected 'wal'" in message
    assert "synchronous is 0, expected 2" in message
    assert "foreign_keys is 0, expected 1" in message
    conn.close()


@pytest.mark.sqlite_only  # pragmas
async def test_store_pragmas_hold_after_open(store: db.Store) -> None:
    def read(conn: sqlite3.Connection) -> tuple[str, int]:
        return conn.execute("PRAGMA journal_mode").fetchone()[0], conn.execute(
            "PRAGMA query_only"
        ).fetchone()[0]

    assert await store.read(read) == ("wal", 1)


async def test_normal_synchronous_by_setting(data_dir: Path) -> None:
    opened = await db.open(db.StoreConfig(data_dir=data_dir, synchronous="NORMAL"))
    try:
        level = await opened.write(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0])
        assert level == 1
    finally:
        await opened.close()


async def test_units_read_rows_by_column_name_on_every_connection(store: db.Store) -> None:
    """Both backends hand units rows readable by name that still equal plain tuples."""

    def unit(conn: backend.Conn) -> tuple[object, ...]:
        row = conn.execute("SELECT 1 AS one, 'two' AS two").fetchone()
        assert row == (1, "two")
        assert (row != (1, "two")) is False
        assert {row: "hashable"}[(1, "two")] == "hashable"
        return (row["one"], row["two"], dict(row), *row)

    expected = (1, "two", {"one": 1, "two": "two"}, 1, "two")
    assert await store.write(unit) == expected
    assert await store.read(unit) == expected


async def test_readers_cannot_write(store: db.Store) -> None:
    with pytest.raises(errors.StoreError, match=r"read-?only"):
        await store.read(lambda conn: conn.execute("CREATE TABLE nope (x INTEGER)"))


async def test_reads_do_not_queue_behind_writes(store: db.Store) -> None:
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    await store.write(lambda conn: conn.execute("INSERT INTO t VALUES (1)"))
    release = threading.Event()

    def slow_write(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (2)")
        release.wait(10)

    writing = asyncio.create_task(store.write(slow_write))
    await asyncio.sleep(0.05)
    # The writer is inside its transaction; a read still answers, with committed data only.
    count = await asyncio.wait_for(
        store.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]), 5
    )
    assert count == 1
    release.set()
    await writing
    assert await store.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 2


async def test_concurrent_units_share_commits_and_fail_alone(store: db.Store) -> None:
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER UNIQUE)"))

    def insert(value: int) -> Callable[[sqlite3.Connection], None]:
        def unit(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO t VALUES (?)", (value,))
            if value % 10 == 3:
                raise ValueError(f"unit {value} fails")

        return unit

    results = await asyncio.gather(
        *(store.write(insert(i)) for i in range(50)), return_exceptions=True
    )
    failed = [r for r in results if isinstance(r, ValueError)]
    assert len(failed) == 5
    rows = await store.read(lambda c: [r[0] for r in c.execute("SELECT x FROM t ORDER BY x")])
    assert rows == [i for i in range(50) if i % 10 != 3]


async def test_constraint_violation_is_translated(store: db.Store) -> None:
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER NOT NULL)"))
    with pytest.raises(errors.ConstraintViolation):
        await store.write(lambda conn: conn.execute("INSERT INTO t VALUES (NULL)"))


@pytest.mark.sqlite_only  # max_page_count
async def test_disk_full_rolls_back_everything(store: db.Store) -> None:
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x BLOB)"))
    pages = await store.write(lambda conn: conn.execute("PRAGMA page_count").fetchone()[0])

    def fill(conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA max_page_count={pages + 2}")
        conn.execute("INSERT INTO t VALUES (zeroblob(4096))")
        conn.execute("INSERT INTO t VALUES (zeroblob(1000000))")

    with pytest.raises(errors.StorageFull):
        await store.write(fill)
    assert await store.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 0
    # The writer is still usable afterwards.
    await store.write(lambda conn: conn.execute("PRAGMA max_page_count=1073741823"))
    await store.write(lambda conn: conn.execute("INSERT INTO t VALUES (x'00')"))


@pytest.mark.sqlite_only  # the WAL file
async def test_checkpoint_truncates_the_wal(store: db.Store) -> None:
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x BLOB)"))
    for _ in range(20):
        await store.write(lambda conn: conn.execute("INSERT INTO t VALUES (zeroblob(8000))"))
    assert store.wal_bytes() > 100_000
    busy, _, _ = await store.checkpoint("TRUNCATE")
    assert busy == 0
    assert store.wal_bytes() == 0


async def test_idle_checkpointer_runs_by_itself(data_dir: Path) -> None:
    config = db.StoreConfig(data_dir=data_dir, checkpoint_every_s=0.05, wal_max_bytes=1)
    opened = await db.open(config)
    try:
        await opened.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
        assert opened.wal_bytes() > 0
        for _ in range(100):
            if opened.wal_bytes() == 0:
                break
            await asyncio.sleep(0.05)
        assert opened.wal_bytes() == 0
    finally:
        await opened.close()


async def test_readonly_store_reads_beside_the_writer(store: db.Store, data_dir: Path) -> None:
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    await store.write(lambda conn: conn.execute("INSERT INTO t VALUES (7)"))
    reader = await db.open(store.config, readonly=True)
    try:
        assert await reader.read(lambda c: c.execute("SELECT x FROM t").fetchone()[0]) == 7
        with pytest.raises(errors.StoreError, match="read-only"):
            await reader.write(lambda conn: None)
    finally:
        await reader.close()


async def test_closed_store_refuses_work(store_config: db.StoreConfig) -> None:
    opened = await db.open(store_config)
    await opened.close()
    with pytest.raises(errors.Closed):
        await opened.write(lambda conn: None)


def _inserting(value: int) -> Callable[[sqlite3.Connection], None]:
    def unit(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (?)", (value,))

    return unit


async def _values(store: db.Store) -> list[int]:
    return await store.read(lambda c: [r[0] for r in c.execute("SELECT x FROM t ORDER BY x")])


@pytest.mark.sqlite_only  # group commit
async def test_a_failed_group_commit_fails_every_caller_in_it_and_writes_nothing(
    store: db.Store,
) -> None:
    """Disk full inside a shared transaction: SQLite drops all of it, so every unit fails."""
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    pages = await store.write(lambda conn: conn.execute("PRAGMA page_count").fetchone()[0])

    def fill(conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA max_page_count={pages + 2}")
        conn.execute("INSERT INTO t VALUES (zeroblob(1000000))")

    results = await asyncio.gather(
        store.write(_inserting(1)), store.write(fill), store.write(_inserting(2)),
        return_exceptions=True,
    )  # fmt: skip
    assert [type(r) for r in results] == [errors.StorageFull] * 3
    assert results[0] is results[1] is results[2]  # one failure, told to every caller
    await store.write(lambda conn: conn.execute("PRAGMA max_page_count=1073741823"))
    assert await _values(store) == []
    await store.write(_inserting(3))  # the writer carries on
    assert await _values(store) == [3]


Unit = Callable[[sqlite3.Connection], None]


def _blocking(value: int, started: threading.Event, release: threading.Event) -> Unit:
    def unit(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (?)", (value,))
        started.set()
        assert release.wait(10), "the test never released the unit"

    return unit


def _operator_writes(store: db.Store, value: int) -> asyncio.Task[None]:
    """A write made as a Telegram update's are: in the foreground."""

    async def operator() -> None:
        with db.foreground():
            await store.write(_inserting(value))

    return asyncio.create_task(operator())


async def _until(flag: threading.Event) -> None:
    for _ in range(500):
        if flag.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the unit never started")


async def test_a_caller_cancelled_while_its_unit_runs_still_gets_it_committed(
    store: db.Store,
) -> None:
    """The unit is already inside the transaction: it commits, and nobody is told."""
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    started, release = threading.Event(), threading.Event()
    caller = asyncio.create_task(store.write(_blocking(1, started, release)))
    await _until(started)
    caller.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await caller
    # Nobody waits for it any more, and it still commits: on SQLite before the next write
    # (one writer), on PostgreSQL on its own lane, beside the next one (so wait for it).
    for _ in range(500):
        if await _values(store) == [1]:
            break
        await asyncio.sleep(0.01)
    await store.write(_inserting(2))
    assert await _values(store) == [1, 2]


@pytest.mark.sqlite_only  # one writer's queue
async def test_a_caller_cancelled_while_queued_never_runs(store: db.Store) -> None:
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    started, release = threading.Event(), threading.Event()
    first = asyncio.create_task(store.write(_blocking(1, started, release)))
    await _until(started)
    queued = asyncio.create_task(store.write(_inserting(2)))
    await asyncio.sleep(0.05)  # it is in the writer's queue, behind the running unit
    queued.cancel()
    release.set()
    await first
    with pytest.raises(asyncio.CancelledError):
        await queued
    await store.write(_inserting(3))
    assert await _values(store) == [1, 3]


@pytest.mark.sqlite_only  # one writer's queue
async def test_a_write_an_operator_waits_for_goes_ahead_of_queued_background_work(
    store: db.Store,
) -> None:
    """A tap's write waits for the transaction in flight, not for a tick's whole queue."""
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    started, release = threading.Event(), threading.Event()
    first = asyncio.create_task(store.write(_blocking(1, started, release)))
    await _until(started)
    background = [asyncio.create_task(store.write(_inserting(n))) for n in (2, 3)]
    tapped = _operator_writes(store, 9)
    await asyncio.sleep(0.05)  # all three wait behind the running unit
    release.set()
    await asyncio.gather(first, *background, tapped)
    order = await store.read(lambda c: [r[0] for r in c.execute("SELECT x FROM t ORDER BY rowid")])
    assert order == [1, 9, 2, 3]
    await store.write(_inserting(4))  # out of the block, a write queues as before
    assert (await _values(store))[-1] == 9 and len(await _values(store)) == 5


@pytest.mark.sqlite_only  # one writer's batches
async def test_a_background_batch_in_flight_commits_early_for_an_operator(
    store: db.Store,
) -> None:
    """A tap arriving mid-batch waits for the unit running and a commit, not the batch."""
    await store.write(lambda conn: conn.execute("CREATE TABLE t (x INTEGER)"))
    started, release = threading.Event(), threading.Event()
    # Queued in one loop turn, the four share one batch; the first holds it open.
    batch = [asyncio.create_task(store.write(_blocking(1, started, release)))]
    batch += [asyncio.create_task(store.write(_inserting(n))) for n in (2, 3, 4)]
    await _until(started)
    tapped = _operator_writes(store, 9)
    await asyncio.sleep(0.05)  # the operator's unit waits for the running one
    release.set()
    assert await asyncio.gather(*batch, tapped) == [None] * 5
    order = await store.read(lambda c: [r[0] for r in c.execute("SELECT x FROM t ORDER BY rowid")])
    assert order == [1, 9, 2, 3, 4]  # the rest of the batch ran after, in its order
