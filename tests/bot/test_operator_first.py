"""Updates are handled as an operator's work: their writes go ahead of a tick's."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

from bot import app
from store import db


async def test_an_updates_writes_go_ahead_of_background_work(tmp_path: Path) -> None:
    store = await db.open(db.StoreConfig(data_dir=tmp_path / "data"))
    try:
        await store.write(lambda conn: conn.execute("CREATE TABLE t (x TEXT)"))
        started, release = threading.Event(), threading.Event()

        def hold(conn: sqlite3.Connection) -> None:
            started.set()
            assert release.wait(10), "the test never released the writer"

        def insert(value: str) -> object:
            return lambda conn: conn.execute("INSERT INTO t VALUES (?)", (value,))

        held = asyncio.create_task(store.write(hold))
        await asyncio.to_thread(started.wait, 10)
        tick = asyncio.create_task(store.write(insert("tick")))
        handled = asyncio.create_task(
            app.OperatorFirst(1).process_update(object(), store.write(insert("tap")))
        )
        await asyncio.sleep(0.05)  # both wait behind the held writer
        release.set()
        await asyncio.gather(held, tick, handled)
        rows = await store.read(
            lambda c: [r[0] for r in c.execute("SELECT x FROM t ORDER BY rowid")]
        )
        assert rows == ["tap", "tick"]
    finally:
        await store.close()
