"""A lane: one connection on one thread. `run` awaits a result; `start` hands it to a
callback on the loop's thread, with the driver's errors translated, and refuses work
once the lane has stopped. The writer answers its callers from that callback."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from store import db, errors
from store.backends.lanes import Lane

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def lane(tmp_path: Path) -> Any:
    opened: Lane[sqlite3.Connection] = Lane("test-lane")
    await opened.open(lambda: sqlite3.connect(tmp_path / "lane.db", isolation_level=None))
    yield opened
    await opened.close()


async def _started(lane: Lane[sqlite3.Connection], fn: Any, *args: Any) -> tuple[Any, ...]:
    """What `done` was called with, and on which thread."""
    called: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()

    def done(result: Any, error: BaseException | None) -> None:
        called.set_result((result, error, threading.current_thread().name))

    lane.start(done, fn, *args)
    return await called


async def test_start_hands_the_result_to_done_on_the_loops_thread(
    lane: Lane[sqlite3.Connection],
) -> None:
    def on_lane(conn: sqlite3.Connection, value: int) -> tuple[int, str]:
        return conn.execute("SELECT ?", (value,)).fetchone()[0], threading.current_thread().name

    (value, thread), error, called_on = await _started(lane, on_lane, 7)
    assert (value, thread, error) == (7, "test-lane", None)
    assert called_on == threading.current_thread().name


async def test_run_passes_arguments_by_position_and_by_name(
    lane: Lane[sqlite3.Connection],
) -> None:
    def scaled(conn: sqlite3.Connection, value: int, *, by: int = 1) -> int:
        return int(conn.execute("SELECT ? * ?", (value, by)).fetchone()[0])

    assert await lane.run(scaled, 7, by=3) == 21


def test_a_process_that_never_closes_its_lane_still_exits(tmp_path: Path) -> None:
    script = (
        "import asyncio, sqlite3\n"
        "from store.backends.lanes import Lane\n"
        "async def main():\n"
        "    lane = Lane('left-open')\n"
        f"    await lane.open(lambda: sqlite3.connect({str(tmp_path / 'lane.db')!r}))\n"
        "asyncio.run(main())\n"
        "print('ended')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "ended\n"), done.stderr


async def test_start_hands_a_driver_error_to_done_translated(
    lane: Lane[sqlite3.Connection],
) -> None:
    result, error, _ = await _started(lane, lambda conn: conn.execute("SELECT * FROM nowhere"))
    assert result is None
    assert isinstance(error, errors.StoreError)
    assert "no such table: nowhere" in str(error)
    assert isinstance(error.__cause__, sqlite3.OperationalError)


async def test_start_hands_other_errors_to_done_as_raised(
    lane: Lane[sqlite3.Connection],
) -> None:
    def failing(conn: sqlite3.Connection) -> None:
        raise ValueError("not the driver's")

    _, error, _ = await _started(lane, failing)
    assert isinstance(error, ValueError) and str(error) == "not the driver's"


async def test_a_stopped_lane_refuses_work(tmp_path: Path) -> None:
    lane: Lane[sqlite3.Connection] = Lane("stopping")
    await lane.open(lambda: sqlite3.connect(tmp_path / "lane.db"))
    await lane.close()
    with pytest.raises(errors.Closed):
        lane.start(lambda result, error: None, lambda conn: None)
    with pytest.raises(errors.Closed):
        await lane.run(lambda conn: None)


@pytest.mark.sqlite_only  # the single writer's lane
async def test_the_writer_answers_closed_when_its_lane_stopped_underneath(
    store: db.Store,
) -> None:
    await store._writer_lane.close()  # type: ignore[attr-defined]  # the fault under test
    for _ in range(2):  # the writer answers, and is still there to answer the next
        with pytest.raises(errors.Closed):
            await asyncio.wait_for(store.write(lambda conn: None), timeout=10)
