"""Settling a claim, value for value: what a settlement returns, records and refuses.

test_ledger.py proves the money moves once; these pin each figure, text and refusal
of complete() and reconcile(), so a one-character change to the settle code fails.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime, timedelta

import pytest

from store import db, errors, items, ledger
from store.audit import events
from store.ledger import settle as ledger_settle
from store.ledger.machine import ClaimState
from store.ledger.prices import Usage
from tests import snapshot

USAGE = Usage(800, 200)
LEASE = timedelta(minutes=5)


async def _started(store: db.Store, now: datetime, item_id: int | None = None) -> ledger.Work:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), "cli", now)
    work = await ledger.begin(
        store, ledger.Call("k1", "chat", {"p": 1}, 1_000, "news", item_id, LEASE), now
    )
    await ledger.start_provider(store, work.id, now)
    return work


async def test_a_settlement_records_every_figure(store: db.Store, now: datetime) -> None:
    work = await _started(store, now)
    later = now + timedelta(seconds=3)
    result = await ledger.complete(store, work.id, ledger.Actual(700, "req-1", USAGE), None, later)
    claim = await ledger.get(store, work.id)
    assert result == ledger_settle.Settlement(claim)
    assert (claim.state, claim.actual_micros, claim.evidence, claim.usage) == (
        ClaimState.SETTLED,
        700,
        "req-1",
        USAGE,
    )
    reason = "actual 700 of 1000 micros held; evidence req-1"
    assert (claim.reason, claim.ended_at) == (reason, later)
    last = (await events.for_entity(store, "claim", work.id))[-1]
    assert (last.from_state, last.to_state, last.actor, last.reason, last.at) == (
        "started",
        "settled",
        "system",
        reason,
        later,
    )
    again = await ledger.complete(store, work.id, ledger.Actual(700, "req-1", USAGE), None, later)
    assert again == ledger_settle.Settlement(claim, replayed=True, overrun_micros=0)


async def test_an_overrun_is_spent_flagged_and_alerted(store: db.Store, now: datetime) -> None:
    work = await _started(store, now)
    result = await ledger.complete(store, work.id, ledger.Actual(1_250, "req-1", USAGE), None, now)
    assert (result.overrun_micros, result.replayed) == (250, False)
    claim = await ledger.get(store, work.id)
    assert claim.reason == (
        "actual 1250 of 1000 micros held; evidence req-1; OVERRUN by 250 micros"
    )
    again = await ledger.complete(store, work.id, ledger.Actual(1_250, "req-1", USAGE), None, now)
    assert again == ledger_settle.Settlement(claim, replayed=True, overrun_micros=250)
    rows = await store.read(
        lambda c: c.execute("SELECT payload FROM outbox WHERE kind = 'alert'").fetchall()
    )
    alerts = [json.loads(row[0]) for row in rows]
    # The store records the facts; the bot words them (tests/bot/test_alerts.py).
    assert [a for a in alerts if a.get("about") == "claim_overrun"] == [
        {
            "level": "error",
            "about": "claim_overrun",
            "facts": {"claim_id": work.id, "held_micros": 1000, "cost_micros": 1250},
        }
    ]


@pytest.mark.parametrize("evidence", ["", "   ", "x" * 1001])
async def test_evidence_must_be_a_short_non_empty_text(
    store: db.Store, now: datetime, evidence: str
) -> None:
    work = await _started(store, now)
    before = await snapshot.tables(store)
    message = (
        "evidence must be a non-empty text of at most 1000 characters "
        "(the provider's request id, or what was checked)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        await ledger.complete(store, work.id, ledger.Actual(700, evidence, USAGE), None, now)
    assert await snapshot.tables(store) == before


async def test_evidence_of_exactly_the_limit_is_kept(store: db.Store, now: datetime) -> None:
    work = await _started(store, now)
    await ledger.complete(store, work.id, ledger.Actual(700, "x" * 1000, USAGE), None, now)
    assert (await ledger.get(store, work.id)).evidence == "x" * 1000


async def test_complete_refusals_name_the_state_and_what_to_do(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), "cli", now)
    reserved = await ledger.begin(
        store, ledger.Call("r", "chat", {"p": 1}, 100, "news", None, LEASE), now
    )
    uncertain = await ledger.begin(
        store, ledger.Call("u", "chat", {"p": 2}, 100, "news", None, LEASE), now
    )
    await ledger.start_provider(store, uncertain.id, now)
    await ledger.fail(store, uncertain.id, "timeout", now)
    released = await ledger.begin(
        store, ledger.Call("f", "chat", {"p": 3}, 100, "news", None, LEASE), now
    )
    await ledger.fail(store, released.id, "never sent", now)
    before = await snapshot.tables(store)
    expected = {
        reserved.id: f"claim {reserved.id} is reserved: start_provider was never called, "
        "so nothing was spent",
        uncertain.id: f"claim {uncertain.id} is uncertain: an operator settles it with "
        "reconcile() and evidence",
    }
    for work_id, message in expected.items():
        with pytest.raises(errors.IllegalTransition, match=f"^{re.escape(message)}$"):
            await ledger.complete(store, work_id, ledger.Actual(10, "req", USAGE), None, now)
    state = (await ledger.get(store, released.id)).state
    with pytest.raises(errors.IllegalTransition, match=f"^claim {released.id} is {state}: it is"):
        await ledger.complete(store, released.id, ledger.Actual(10, "req", USAGE), None, now)
    assert await snapshot.tables(store) == before


async def test_a_second_completion_with_other_figures_says_both(
    store: db.Store, now: datetime
) -> None:
    work = await _started(store, now)
    await ledger.complete(store, work.id, ledger.Actual(700, "req-1", USAGE), None, now)
    before = await snapshot.tables(store)
    for usage, actual, evidence in ((USAGE, 700, "req-2"), (Usage(1, 1), 700, "req-1")):
        with pytest.raises(errors.Conflict) as refused:
            await ledger.complete(store, work.id, ledger.Actual(actual, evidence, usage), None, now)
        assert str(refused.value) == (
            f"claim {work.id} is already settled at 700 micros (evidence 'req-1'); "
            f"this completion says {actual} (evidence {evidence!r})"
        )
    assert await snapshot.tables(store) == before


async def test_a_changed_item_names_both_hashes(store: db.Store, now: datetime) -> None:
    item = await store.write(items.create_sync, "news", "feed", "g", {"title": "a"}, now)
    assert item is not None
    work = await _started(store, now, item.id)
    with pytest.raises(errors.Conflict) as refused:
        await ledger.complete(store, work.id, ledger.Actual(700, "req-1", USAGE), "other", now)
    assert str(refused.value) == (
        f"item {item.id}'s content hash completed with (other) is not the one the claim "
        f"began with ({item.content_hash}); the hold stays until an operator reconciles it"
    )
    claim = await ledger.get(store, work.id)
    assert (claim.state, claim.actual_micros, claim.reason) == (
        ClaimState.UNCERTAIN,
        None,
        str(refused.value),
    )


async def test_a_claim_without_an_item_settles_whatever_hash_is_passed(
    store: db.Store, now: datetime
) -> None:
    work = await _started(store, now)
    result = await ledger.complete(store, work.id, ledger.Actual(700, "req-1", USAGE), "any", now)
    assert result.claim.state == ClaimState.SETTLED and result.content_changed is None


async def test_reconcile_value_for_value(store: db.Store, now: datetime) -> None:
    work = await _started(store, now)
    await ledger.fail(store, work.id, "timeout", now)
    before = await snapshot.tables(store)
    with pytest.raises(ValueError, match="unknown actor 'someone'"):
        await ledger.reconcile(store, work.id, ledger.Actual(5, "invoice"), "someone", now)
    assert await snapshot.tables(store) == before
    result = await ledger.reconcile(
        store, work.id, ledger.Actual(1_100, "invoice 7"), "operator:9", now
    )
    claim = await ledger.get(store, work.id)
    assert result == ledger_settle.Settlement(claim, overrun_micros=100)
    assert (claim.usage, claim.evidence, claim.reason) == (
        None,
        "invoice 7",
        "actual 1100 of 1000 micros held; evidence invoice 7; OVERRUN by 100 micros",
    )
    again = await ledger.reconcile(
        store, work.id, ledger.Actual(1_100, "invoice 7 again"), "operator:9", now
    )
    assert again == dataclasses.replace(result, replayed=True)
    other = await ledger.begin(
        store, ledger.Call("k2", "chat", {"p": 2}, 100, "news", None, LEASE), now
    )
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict) as refused:
        await ledger.reconcile(store, work.id, ledger.Actual(1_000, "other"), "operator:9", now)
    assert str(refused.value) == (
        f"claim {work.id} is already settled at 1100 micros; reconcile says 1000"
    )
    with pytest.raises(errors.IllegalTransition) as illegal:
        await ledger.reconcile(store, other.id, ledger.Actual(5, "invoice"), "operator:9", now)
    assert str(illegal.value) == (
        f"claim {other.id} is reserved; only an uncertain claim can be reconciled"
    )
    assert await snapshot.tables(store) == before


async def test_a_negative_figure_is_refused_by_name(store: db.Store, now: datetime) -> None:
    work = await _started(store, now)
    before = await snapshot.tables(store)
    message = "actual_micros must be a whole number of micros >= 0, got -1"
    for settle in (
        ledger.complete(store, work.id, ledger.Actual(-1, "req", USAGE), None, now),
        ledger.reconcile(store, work.id, ledger.Actual(-1, "invoice"), "cli", now),
    ):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            await settle
    assert await snapshot.tables(store) == before


async def test_a_changed_stored_item_is_named_and_the_claim_returned_uncertain(
    store: db.Store, now: datetime
) -> None:
    item = await store.write(items.create_sync, "news", "feed", "g", {"title": "a"}, now)
    assert item is not None
    work = await _started(store, now, item.id)
    await store.write(
        lambda c: c.execute("UPDATE items SET content_hash = 'x' WHERE id = ?", (item.id,))
    )
    result = await store.write(
        lambda c: ledger_settle.complete_sync(
            c, work.id, ledger_settle.Actual(700, "req-1", USAGE), item.content_hash, now
        )
    )
    message = (
        f"item {item.id}'s content hash now stored (x) is not the one the claim began with "
        f"({item.content_hash}); the hold stays until an operator reconciles it"
    )
    assert result == ledger_settle.Settlement(
        await ledger.get(store, work.id), content_changed=message
    )
    assert result.claim.state == ClaimState.UNCERTAIN


async def test_a_free_call_settles_at_zero_without_an_overrun(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), "cli", now)
    work = await ledger.begin(
        store, ledger.Call("free", "chat", {"p": 1}, 0, "news", None, LEASE), now
    )
    await ledger.start_provider(store, work.id, now)
    first = await ledger.complete(store, work.id, ledger.Actual(0, "req-0", USAGE), None, now)
    again = await ledger.complete(store, work.id, ledger.Actual(0, "req-0", USAGE), None, now)
    assert (first.overrun_micros, again.overrun_micros, again.replayed) == (0, 0, True)


async def test_settling_one_claim_leaves_the_others_started(store: db.Store, now: datetime) -> None:
    first = await _started(store, now)
    other = await ledger.begin(
        store, ledger.Call("k2", "chat", {"p": 2}, 500, "news", None, LEASE), now
    )
    await ledger.start_provider(store, other.id, now)
    await ledger.complete(store, first.id, ledger.Actual(700, "req-1", USAGE), None, now)
    untouched = await ledger.get(store, other.id)
    assert (untouched.state, untouched.actual_micros, untouched.evidence) == (
        ClaimState.STARTED,
        None,
        None,
    )
    assert [e.to_state for e in await events.for_entity(store, "claim", other.id)] == [
        "reserved",
        "started",
    ]
