"""A process killed (SIGKILL) between the provider call and complete(): the claim is never
released; recover() makes it uncertain and reconcile() settles it exactly once.

The child is this module run as `python -m tests.e2e.test_crash_claims ...`: it opens the
store, and drafts one item with the real LlmDrafter against the FakeLLM served by the
test, which holds the request unanswered; the test kills the child once the fake saw it.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from pipelines.config import spec
from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from store import db, errors, items, ledger
from store.ledger.machine import ClaimState
from tests import snapshot
from tests.fakes.llm_server import FakeLLM
from tests.pipelines.test_llm_drafter import MODEL, PRICE, write_pipeline

ROOT = Path(__file__).resolve().parents[2]
#: 10 ms looks before the test stops waiting for the child (pytest-timeout is the backstop).
POLLS = 3000


async def _child(data_dir: str, pipelines_dir: str, base_url: str, item_id: str, now: str) -> None:
    pipeline = spec.load_dir(Path(pipelines_dir)).pipelines["news"]
    settings = providers.ProviderSettings(
        kind="openai", base_url=base_url, api_key=SecretStr("k"), model=MODEL, timeout_s=120
    )
    store = await db.open(db.StoreConfig(data_dir=Path(data_dir)))
    async with providers.ProviderClient(settings) as provider:
        drafter = llm_drafter.LlmDrafter(store, pipeline, provider, PRICE)
        item = await items.get(store, int(item_id))
        await drafter.draft(item, datetime.fromisoformat(now))  # the fake never answers
    raise SystemExit("the provider answered; the test expected to kill this process first")


async def _wait_for_call(llm: FakeLLM, child: asyncio.subprocess.Process) -> None:
    for _ in range(POLLS):
        if llm.calls:
            return
        if child.returncode is not None:
            _, err = await child.communicate()
            pytest.fail(f"the child exited early ({child.returncode}): {err.decode()}")
        await asyncio.sleep(0.01)
    pytest.fail("the child never called the provider")


async def test_sigkill_between_call_and_complete_is_reconciled_exactly_once(
    data_dir: Path, tmp_path: Path, now: datetime
) -> None:
    pipelines_dir = tmp_path / "pipelines"
    pipelines_dir.mkdir()
    with FakeLLM() as llm:
        write_pipeline(pipelines_dir, "http://127.0.0.1:9/feed.xml")
        store = await db.open(db.StoreConfig(data_dir=data_dir))
        await ledger.set_budget(store, ledger.Limit("news", "month", 10_000_000), "cli", now)
        item = await store.write(
            items.create_sync, "news", "s0", "k1", {"title": "T", "text": "body"}, now
        )
        assert item is not None
        await store.close()  # one writer: the child takes the lock now

        llm.queue_fault("timeout", hold_s=60)
        args = [str(data_dir), str(pipelines_dir), llm.base_url, str(item.id), now.isoformat()]
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.e2e.test_crash_claims",
            *args,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await _wait_for_call(llm, child)
        finally:
            if child.returncode is None:
                child.send_signal(signal.SIGKILL)
            await child.communicate()
    assert child.returncode == -signal.SIGKILL

    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await _check_recovery(store, now)
    finally:
        await store.close()


async def _check_recovery(store: db.Store, now: datetime) -> None:
    [claim_id] = [
        row[0] for row in await store.read(lambda c: c.execute("SELECT id FROM claims").fetchall())
    ]
    claim = await ledger.get(store, claim_id)
    assert claim.state == ClaimState.STARTED  # the call was authorized; nothing settled it
    assert await ledger.recover(store, now) == []  # the lease still runs
    later = claim.lease_until + timedelta(seconds=1)
    [recovered] = await ledger.recover(store, later)
    assert (recovered.id, recovered.state) == (claim_id, ClaimState.UNCERTAIN)
    report = await ledger.report(store, later)
    assert [u.claim_id for u in report.uncertain] == [claim_id]
    [budget] = report.budgets
    assert (budget.spent_micros, budget.held_micros) == (0, claim.reserved_micros)
    assert await ledger.recover(store, later) == []  # never released by a second sweep

    first = await ledger.reconcile(
        store, claim_id, ledger.Actual(1234, "invoice line 7"), "operator:7", later
    )
    again = await ledger.reconcile(
        store, claim_id, ledger.Actual(1234, "invoice line 7"), "operator:7", later
    )
    assert (first.replayed, again.replayed) == (False, True)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.Conflict):
        await ledger.reconcile(
            store, claim_id, ledger.Actual(999, "another figure"), "operator:7", later
        )
    assert await snapshot.tables(store) == unchanged
    [budget] = (await ledger.report(store, later)).budgets
    assert (budget.spent_micros, budget.held_micros) == (1234, 0)
    assert (await ledger.get(store, claim_id)).state == ClaimState.SETTLED


if __name__ == "__main__":
    asyncio.run(_child(*sys.argv[1:]))
