"""With several PostgreSQL workers a slot fires once: the transition is the claim."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from store import backend, db
from store.audit import events
from store.queue import holdings, machine, slots
from store.queue.slots import Slot
from tests import pg_databases
from tests.store.queue.conftest import HOUR, T0, new_items

LATE = T0 + machine.FLOOR
SLOTS = 12
TRIES = 3  # claims per worker per slot


@pytest.fixture
async def workers(
    pg_run_database: pg_databases.Server, tmp_path: Path
) -> AsyncIterator[list[db.Store]]:
    pg_run_database.empty_tables()
    url = pg_run_database.run_url
    opened = [
        await db.open(db.StoreConfig(data_dir=tmp_path / name, database_url=url))
        for name in ("a", "b")
    ]
    try:
        yield opened
    finally:
        for store in opened:
            await store.close()


async def test_two_workers_claiming_every_slot_fire_each_once(workers: list[db.Store]) -> None:
    def queue(conn: backend.Conn) -> list[Slot]:
        made = slots.open_window_sync(conn, "city", [T0 + HOUR * n for n in range(SLOTS)], T0)
        for item_id in new_items(conn, SLOTS, T0):
            holdings.assign_sync(conn, "city", item_id, "system", T0)
        return made

    made = await workers[0].write(queue)
    claims = [
        slots.fire(store, slot.id, "scheduler", LATE)
        for slot in made
        for store in workers
        for _ in range(TRIES)
    ]
    won = [fired for fired in await asyncio.gather(*claims) if fired is not None]
    assert sorted(s.id for s in won) == [s.id for s in made]
    for slot in made:
        told = await events.for_entity(workers[1], "slot", slot.id)
        fired = [e for e in told if e.to_state == "firing"]
        assert len(fired) == 1 and fired[0].attempt == 1
