"""The audit witness among workers sharing a PostgreSQL store: only the leader signs
the chain's head (with its own key, named in each checkpoint) and posts it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest

from pipelines.audit import keys as audit_keys
from pipelines.audit import witness
from pipelines.service import runtime
from store import db, items
from store.audit import checkpoints, events
from tests import pg_databases

#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 30.0


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_duties_witness_{os.getpid()}"
    server.drop(name)
    try:
        yield server.create(name)
    finally:
        server.drop(name)


def worker_config(tmp_path: Path, name: str, url: str) -> runtime.RuntimeConfig:
    (tmp_path / "pipelines").mkdir(exist_ok=True)
    (tmp_path / name).mkdir(mode=0o700)  # the worker's own data directory, with its key
    return runtime.RuntimeConfig(
        store=db.StoreConfig(data_dir=tmp_path / name, database_url=url),
        pipelines_dir=tmp_path / "pipelines",
        duties=(witness.worker,),
    )


async def opened(url: str, tmp_path: Path) -> db.Store:
    return await db.open(db.StoreConfig(data_dir=tmp_path / "other", database_url=url))


async def first_signed(store: db.Store) -> None:
    for _ in range(int(WITHIN_S / 0.05)):
        if await store.read(checkpoints.latest_sync) is not None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the leader never signed the head")


async def test_only_the_leader_signs_and_it_signs_once_more_standing_down(
    tmp_path: Path, database_url: str, now: datetime
) -> None:
    store = await opened(database_url, tmp_path)
    await store.write(items.create_sync, "news", "feed", "g1", {"title": "one"}, now)
    leader = await runtime.Runtime.start(worker_config(tmp_path, "a", database_url))
    await first_signed(store)
    await store.write(items.create_sync, "news", "feed", "g2", {"title": "two"}, now)

    follower = await runtime.Runtime.start(worker_config(tmp_path, "b", database_url))
    assert not follower.leader.leading
    await asyncio.sleep(0.1)  # its workers start: a witness among them would sign now
    await follower.stop()  # a follower signs neither at its start nor at its stop
    await store.write(items.create_sync, "news", "feed", "g3", {"title": "three"}, now)
    await leader.stop()  # the leader seals and signs the new head standing down

    a_key = audit_keys.key_id(audit_keys.load_or_create(tmp_path / "a").public_key())
    found = await checkpoints.since(store, 0)
    chain = await events.verify_chain(store)
    await store.close()
    assert [cp.key_id for cp in found] == [a_key, a_key]
    assert found[0].event_id < found[1].event_id == chain.checked  # g3's event included
    assert chain.ok and chain.pending == 0
