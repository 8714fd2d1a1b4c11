"""bench transitions' plain-sqlite3 baseline sends the store's own statements: it moves
items as the store does, on a real store file, whatever the move's statement asks for."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench import transitions
from store import db
from store.backends import datadir


async def test_the_baseline_moves_items_with_the_stores_own_statements(tmp_path: Path) -> None:
    config = db.StoreConfig(data_dir=tmp_path / "data")
    store = await db.open(config)
    try:
        ids = await transitions.create_items(store, 5, "t")
    finally:
        await store.close()
    assert transitions.raw(config.db_path, ids, [2, 3]) > 0
    with sqlite3.connect(tmp_path / "data" / datadir.DB_NAME) as conn:
        states = conn.execute("SELECT state FROM items ORDER BY id").fetchall()
        moves = conn.execute("SELECT count(*) FROM events WHERE to_state = 'drafting'")
        assert (states, moves.fetchone()[0]) == ([("drafting",)] * 5, 5)
