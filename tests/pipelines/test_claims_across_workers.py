"""Two workers on one PostgreSQL store and one item: the second finds the first's
provider call in flight (the first was paused past its run's lease) and waits for it,
with no second call; the first's late reply is then kept and used. Real database,
fake provider on a socket."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipelines.drafting import drafters
from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from store import db, items, ledger
from store.items.machine import State
from store.ledger.machine import ClaimState
from tests.fakes.llm_server import FakeLLM, RecordedRequest
from tests.pipelines.test_cluster_health import database  # noqa: F401 (a fixture)
from tests.pipelines.test_llm_drafter import PRICE, provider_settings, write_pipeline

#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 30.0


@pytest.fixture
async def two_stores(
    tmp_path: Path,
    database: str,  # noqa: F811
) -> AsyncIterator[tuple[db.Store, db.Store]]:
    a = await db.open(db.StoreConfig(data_dir=tmp_path / "a", database_url=database))
    b = await db.open(db.StoreConfig(data_dir=tmp_path / "b", database_url=database))
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def test_a_call_in_flight_on_another_worker_is_waited_for_and_its_reply_used(
    two_stores: tuple[db.Store, db.Store], tmp_path: Path
) -> None:
    a, b = two_stores
    now = datetime.now(UTC)
    released = threading.Event()

    def hold(moment: str, _: RecordedRequest) -> None:
        if moment == "request":
            released.wait(WITHIN_S)

    with FakeLLM() as llm:
        llm.observe = hold
        pipeline = write_pipeline(tmp_path, "http://127.0.0.1:9/feed.xml")
        await ledger.set_budget(a, ledger.Limit("global", "day", 10_000_000), "cli", now)
        made = await a.write(
            items.create_sync, "news", "s0", "g1", {"title": "Launch", "text": "Monday"}, now
        )
        assert made is not None
        item = await a.write(items.transition_sync, made.id, State.DRAFTING, "system", now)
        first = providers.ProviderClient(provider_settings(llm))
        second = providers.ProviderClient(provider_settings(llm))
        try:
            paused = asyncio.ensure_future(
                llm_drafter.LlmDrafter(a, pipeline, first, PRICE).draft(item, now)
            )
            for _ in range(int(WITHIN_S * 100)):  # worker A's call reaches the provider
                if llm.calls == 1:
                    break
                await asyncio.sleep(0.01)
            [(claim_id,)] = await b.read(
                lambda conn: conn.execute("SELECT id FROM claims").fetchall()
            )
            assert (await ledger.get(b, claim_id)).state == ClaimState.STARTED

            # Worker B takes the item up (A's run lapsed): it waits, and calls nothing.
            with pytest.raises(drafters.DraftHeld, match="started by another worker"):
                await llm_drafter.LlmDrafter(b, pipeline, second, PRICE).draft(item, now)
            assert llm.calls == 1
            assert (await ledger.get(b, claim_id)).state == ClaimState.STARTED

            released.set()  # A wakes and reads its reply: kept, settled once, used
            result = await paused
            assert result.text.startswith("DRAFT: ")
            assert (await ledger.get(b, claim_id)).state == ClaimState.SETTLED
        finally:
            released.set()
            await first.aclose()
            await second.aclose()
