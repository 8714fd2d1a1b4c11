"""The budget ledger against a real store: budgets, claims, settlement, alerts, /budget."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime, timedelta
from typing import Any

import pydantic
import pytest

from store import db, errors, items, ledger, sql
from store.audit import events
from store.backends import generate
from store.ledger import budgets, claims, prices
from store.ledger import machine as ledger_machine
from store.ledger.machine import ClaimState
from store.ledger.prices import Usage
from tests import snapshot

OP = events.operator(42)
LEASE = timedelta(minutes=10)
USAGE = Usage(800, 200)


async def budget_row(store: db.Store, scope: str, period: str, now: datetime) -> budgets.Budget:
    found = [
        b
        for b in (await ledger.report(store, now)).budgets
        if (b.scope, b.period) == (scope, period)
    ]
    assert len(found) == 1, f"no {scope}/{period} budget"
    return found[0]


async def claim_events(store: db.Store, claim_id: int) -> list[tuple[str | None, str]]:
    return [(e.from_state, e.to_state) for e in await events.for_entity(store, "claim", claim_id)]


async def alerts(store: db.Store) -> list[dict[str, Any]]:
    """The facts of the store's alerts (the bot words them: tests/bot/test_alerts.py)."""
    rows = await store.read(
        lambda c: c.execute(
            "SELECT payload FROM outbox WHERE kind = 'alert' ORDER BY id"
        ).fetchall()
    )
    return [json.loads(row[0]) for row in rows]


async def begin(
    store: db.Store,
    now: datetime,
    key: str = "k1",
    worst: int = 1000,
    pipeline: str = "news",
    **kw: Any,
) -> ledger.Work:
    request = kw.pop("request", {"prompt": key})
    return await ledger.begin(
        store,
        ledger.Call(
            key,
            "drafts.create",
            request,
            worst,
            pipeline,
            kw.pop("item_id", None),
            kw.pop("lease", LEASE),
        ),
        now,
    )


# --- the declaration and the schema -------------------------------------------------------


def test_claim_states_in_code_match_the_migration_and_schema() -> None:
    clause = ledger_machine.check_constraint()
    for path in (sql.SQL_DIR / "migrations" / "0003_ledger.sql", generate.SQLITE_SCHEMA):
        text = path.read_text()
        found = re.findall(
            r"state\s+TEXT NOT NULL (CHECK \(state IN \([^)]*'reserved'[^)]*\)\))", text
        )
        assert found == [clause], f"{path.name}: claims.state CHECK drifted from ledger_machine"


async def test_the_database_refuses_an_undeclared_claim_state(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    work = await begin(store, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.ConstraintViolation):
        await store.write(
            lambda c: c.execute("UPDATE claims SET state = 'completed' WHERE id = ?", (work.id,))
        )
    assert await snapshot.tables(store) == unchanged


# --- prices -------------------------------------------------------------------------------


def test_cost_is_integer_and_rounds_up() -> None:
    price = prices.Price(input_micros_per_mtok=3_000_000, output_micros_per_mtok=15_000_000)
    assert prices.cost(Usage(1_000_000, 0), price) == 3_000_000
    assert prices.cost(Usage(1, 0), price) == 3  # 3 micros exactly
    assert prices.cost(Usage(1, 1), price) == 18
    cheap = prices.Price(input_micros_per_mtok=1, output_micros_per_mtok=1)
    assert prices.cost(Usage(1, 0), cheap) == 1  # a millionth of a micro still rounds up
    assert prices.cost(Usage(0, 0), cheap) == 0
    assert (
        prices.worst_case(price, 8_000, 1_024) == prices.cost(Usage(8_000, 1_024), price) == 39_360
    )


def test_bad_prices_and_usage_are_refused_clearly() -> None:
    with pytest.raises(pydantic.ValidationError, match="greater than or equal to 0"):
        prices.Price(input_micros_per_mtok=-1, output_micros_per_mtok=0)
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        prices.Price.model_validate(
            {"input_micros_per_mtok": 1, "output_micros_per_mtok": 1, "usd": 2}
        )
    price = prices.Price(input_micros_per_mtok=1, output_micros_per_mtok=1)
    with pytest.raises(ValueError, match="output_tokens must be a whole number >= 0"):
        prices.cost(Usage(1, -5), price)
    with pytest.raises(KeyError, match="priced models: a, b"):
        prices.lookup({"b": price, "a": price}, "c")


# --- budgets -------------------------------------------------------------------------------


async def test_set_budget_is_an_event_with_its_actor(store: db.Store, now: datetime) -> None:
    row = await ledger.set_budget(store, ledger.Limit("news", "month", 5_000_000), OP, now)
    assert (row.limit_micros, row.spent_micros, row.held_micros, row.remaining_micros) == (
        5_000_000,
        0,
        0,
        5_000_000,
    )
    assert row.period_start == now.replace(day=1, hour=0)
    await ledger.set_budget(store, ledger.Limit("news", "month", 7_000_000), "cli", now)
    history = await events.for_entity(store, "budget", "news/month")
    assert [(e.from_state, e.to_state, e.actor) for e in history] == [
        (None, "limit:5000000", OP),
        ("limit:5000000", "limit:7000000", "cli"),
    ]
    unchanged = await snapshot.tables(store)
    with pytest.raises(ValueError, match="unknown budget period 'week'; valid: day, month"):
        await ledger.set_budget(store, ledger.Limit("news", "week", 1), OP, now)
    assert await snapshot.tables(store) == unchanged
    with pytest.raises(ValueError, match="unknown actor"):
        await ledger.set_budget(store, ledger.Limit("news", "day", 1), "mallory", now)


async def test_a_limit_below_what_is_spent_and_held_is_refused(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    await begin(store, now, worst=4_000)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="must be at least 4000 micros"):
        await ledger.set_budget(store, ledger.Limit("global", "day", 3_999), OP, now)
    assert await snapshot.tables(store) == before
    assert (
        await ledger.set_budget(store, ledger.Limit("global", "day", 4_000), OP, now)
    ).remaining_micros == 0


async def test_a_limit_is_a_whole_number_of_micros_from_zero(
    store: db.Store, now: datetime
) -> None:
    # Zero is a limit: it stops every call in its scope.
    assert (
        await ledger.set_budget(store, ledger.Limit("news", "day", 0), OP, now)
    ).remaining_micros == 0
    unchanged = await snapshot.tables(store)
    for bad in (-1, True, 1.5, "5"):
        with pytest.raises(ValueError) as refused:
            await ledger.set_budget(store, ledger.Limit("news", "day", bad), OP, now)  # type: ignore[arg-type]
        assert str(refused.value) == f"limit_micros must be a whole number >= 0, got {bad!r}"
    assert await snapshot.tables(store) == unchanged


async def test_holding_gives_back_what_it_held_before_a_scope_ran_out(
    store: db.Store, now: datetime
) -> None:
    """hold_sync's own promise, with no savepoint around it: all of the holds or none."""
    await ledger.set_budget(store, ledger.Limit("news", "month", 10_000), OP, now)
    await ledger.set_budget(store, ledger.Limit("global", "day", 0), OP, now)

    def unit(conn: Any) -> None:
        with pytest.raises(errors.BudgetExceeded) as caught:
            budgets.hold_sync(conn, 1, [("news", "month"), ("global", "day")], 500, now)
        assert str(caught.value).endswith(
            "has 0 micros left (limit 0, spent 0, held 0); this call needs up to 500"
        )

    await store.write(unit)
    assert (await budget_row(store, "news", "month", now)).held_micros == 0


# --- begin ---------------------------------------------------------------------------------


async def test_no_budget_anywhere_creates_work_without_the_provider(
    store: db.Store, now: datetime
) -> None:
    work = await begin(store, now)
    assert (work.state, work.provider_allowed, work.reserved_micros, work.replayed) == (
        ClaimState.UNBUDGETED,
        False,
        0,
        False,
    )
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition, match="deterministic drafter"):
        await ledger.start_provider(store, work.id, now)
    assert await snapshot.tables(store) == unchanged
    assert await claim_events(store, work.id) == [(None, "unbudgeted")]


async def test_holds_go_to_every_configured_scope_and_period(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    await ledger.set_budget(store, ledger.Limit("global", "month", 100_000), OP, now)
    await ledger.set_budget(store, ledger.Limit("news", "day", 5_000), OP, now)
    await ledger.set_budget(store, ledger.Limit("digest", "day", 5_000), OP, now)
    work = await begin(store, now, worst=1_200)
    assert (work.state, work.provider_allowed, work.lease_until) == (
        ClaimState.RESERVED,
        True,
        now + LEASE,
    )
    report = await ledger.report(store, now)
    held = {(b.scope, b.period): b.held_micros for b in report.budgets}
    assert held == {
        ("global", "day"): 1_200,
        ("global", "month"): 1_200,
        ("digest", "day"): 0,
        ("news", "day"): 1_200,
    }
    # Only a pipeline budget, no global one: the pipeline's budget still allows the call.
    other = await begin(store, now, key="k2", pipeline="digest")
    assert other.provider_allowed


async def test_a_replay_returns_the_same_work_and_writes_nothing(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    work = await begin(store, now)
    before = await snapshot.tables(store)
    again = await begin(store, now + timedelta(seconds=5))
    assert (again.id, again.replayed, again.state) == (work.id, True, ClaimState.RESERVED)
    assert await snapshot.tables(store) == before
    await ledger.start_provider(store, work.id, now)
    await ledger.complete(store, work.id, ledger.Actual(700, "req-1", USAGE), None, now)
    done = await begin(store, now)
    assert (done.id, done.state, done.replayed) == (work.id, ClaimState.SETTLED, True)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition):  # a replay can never authorize a second call
        await ledger.start_provider(store, done.id, now)
    assert await snapshot.tables(store) == unchanged
    elsewhere = await ledger.begin(
        store, ledger.Call("k1", "other.endpoint", {"prompt": "k1"}, 10, "news", None, LEASE), now
    )
    assert elsewhere.id != work.id  # the key is hashed with its endpoint


async def test_key_reuse_for_another_request_is_a_conflict_that_changes_nothing(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    await ledger.set_budget(store, ledger.Limit("news", "month", 10_000), OP, now)
    work = await begin(store, now)
    await ledger.start_provider(store, work.id, now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="used for a different request"):
        await begin(store, now, request={"prompt": "something else"})
    with pytest.raises(errors.Conflict):
        await begin(store, now, pipeline="digest", request={"prompt": "k1"})
    assert await snapshot.tables(store) == before


def test_a_requests_digest_is_fixed_data_that_outlives_an_upgrade() -> None:
    # A claim stores the digest of its request, and a retry after a crash (and maybe an
    # upgrade) must compute the same one, or its own key becomes a "different request".
    # So the canonical form is pinned: sorted keys, no spaces, UTF-8 text unescaped.
    request = {"prompt": "café", "options": {"b": [1, 2.5, None], "a": True}}
    digest = "62a7f73dfa932aa1d4dc6051b8a9dc09efb7a63500d7d522071499d79dc67e4a"
    assert claims.request_digest("news", 7, request) == digest
    reordered = {"options": {"a": True, "b": [1, 2.5, None]}, "prompt": "café"}
    assert claims.request_digest("news", 7, reordered) == digest
    # The pipeline and the item are part of what is asked.
    assert claims.request_digest("digest", 7, request) != digest
    assert claims.request_digest("news", 8, request) != digest
    assert claims.request_digest("news", None, request) != digest
    for bad, why in ((float("nan"), "Out of range float"), ({1, 2}, "not JSON serializable")):
        with pytest.raises(ValueError) as refused:
            claims.request_digest("news", 7, {"x": bad})
        assert str(refused.value).startswith(
            "the request must be plain JSON data (dict, list, str, number): "
        )
        assert why in str(refused.value)


async def test_not_enough_budget_names_the_scope_and_holds_nothing(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    await ledger.set_budget(store, ledger.Limit("news", "month", 1_500), OP, now)
    await begin(store, now, key="a", worst=1_000)
    before = await snapshot.tables(store)
    with pytest.raises(errors.BudgetExceeded, match=r"news/month .* has 500 micros left") as caught:
        await begin(store, now, key="b", worst=501)
    assert (caught.value.scope, caught.value.period) == ("news", "month")
    assert await snapshot.tables(store) == before
    assert (await begin(store, now, key="c", worst=500)).state == ClaimState.RESERVED


async def test_bad_arguments_are_refused_before_anything_is_written(
    store: db.Store, now: datetime
) -> None:
    before = await snapshot.tables(store)
    with pytest.raises(ValueError, match="worst_case_micros must be a whole number"):
        await begin(store, now, worst=-1)
    unchanged = await snapshot.tables(store)
    with pytest.raises(ValueError, match="not a pipeline name"):
        await begin(store, now, pipeline="global")
    assert await snapshot.tables(store) == unchanged
    with pytest.raises(ValueError, match="plain JSON data"):
        await begin(store, now, request={"when": now})
    unchanged = await snapshot.tables(store)
    with pytest.raises(ValueError, match="lease must be positive"):
        await begin(store, now, lease=timedelta(0))
    assert await snapshot.tables(store) == unchanged
    with pytest.raises(errors.NotFound, match="no item 99"):
        await begin(store, now, item_id=99)
    assert await snapshot.tables(store) == before


# --- start, complete, fail -----------------------------------------------------------------


async def test_start_provider_is_the_one_gate(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    work = await begin(store, now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.LeaseExpired, match="lease expired"):
        await ledger.start_provider(store, work.id, now + LEASE)
    assert await snapshot.tables(store) == before
    started = await ledger.start_provider(store, work.id, now + LEASE - timedelta(milliseconds=1))
    assert started.state == ClaimState.STARTED
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition, match="only authorizes a reserved claim, once"):
        await ledger.start_provider(store, work.id, now)
    assert await snapshot.tables(store) == unchanged
    with pytest.raises(errors.NotFound):
        await ledger.start_provider(store, 999, now)


async def test_complete_settles_exactly_once(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    await ledger.set_budget(store, ledger.Limit("news", "month", 10_000), OP, now)
    work = await begin(store, now, worst=1_000)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition, match="start_provider was never called"):
        await ledger.complete(store, work.id, ledger.Actual(700, "req-1", USAGE), None, now)
    assert await snapshot.tables(store) == unchanged
    await ledger.start_provider(store, work.id, now)
    result = await ledger.complete(store, work.id, ledger.Actual(700, "req-1", USAGE), None, now)
    assert (result.claim.state, result.claim.actual_micros, result.replayed) == (
        ClaimState.SETTLED,
        700,
        False,
    )
    assert (result.claim.usage, result.claim.evidence) == (USAGE, "req-1")
    for scope, period in (("global", "day"), ("news", "month")):
        row = await budget_row(store, scope, period, now)
        assert (row.spent_micros, row.held_micros, row.remaining_micros) == (700, 0, 9_300)
    settled = await snapshot.tables(store)
    again = await ledger.complete(
        store, work.id, ledger.Actual(700, "req-1", USAGE), None, now + timedelta(minutes=1)
    )
    assert again.replayed and await snapshot.tables(store) == settled
    with pytest.raises(errors.Conflict, match="already settled at 700"):
        await ledger.complete(store, work.id, ledger.Actual(701, "req-1", USAGE), None, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="cannot fail"):
        await ledger.fail(store, work.id, "late error", now)
    assert await snapshot.tables(store) == settled
    assert await claim_events(store, work.id) == [
        (None, "reserved"),
        ("reserved", "started"),
        ("started", "settled"),
    ]


async def test_fifty_concurrent_completions_settle_once(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    work = await begin(store, now, worst=1_000)
    await ledger.start_provider(store, work.id, now)
    results = await asyncio.gather(
        *(
            ledger.complete(store, work.id, ledger.Actual(600, "req-1", USAGE), None, now)
            for _ in range(50)
        )
    )
    assert sum(not r.replayed for r in results) == 1
    row = await budget_row(store, "global", "day", now)
    assert (row.spent_micros, row.held_micros) == (600, 0)
    settles = [
        e for e in await events.for_entity(store, "claim", work.id) if e.to_state == "settled"
    ]
    assert len(settles) == 1


async def test_fail_before_start_releases_and_after_start_keeps_the_hold(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    early = await begin(store, now, key="early", worst=1_000)
    late = await begin(store, now, key="late", worst=2_000)
    await ledger.start_provider(store, late.id, now)
    assert (await ledger.fail(store, early.id, "prompt too long", now)).state == ClaimState.RELEASED
    assert (await ledger.fail(store, late.id, "timeout", now)).state == ClaimState.UNCERTAIN
    row = await budget_row(store, "global", "day", now)
    assert (row.spent_micros, row.held_micros) == (0, 2_000)
    repeat = await snapshot.tables(store)
    await ledger.fail(store, early.id, "again", now)
    await ledger.fail(store, late.id, "again", now)
    assert await snapshot.tables(store) == repeat
    with pytest.raises(errors.IllegalTransition, match="reconcile"):
        await ledger.complete(store, late.id, ledger.Actual(10, "req", USAGE), None, now)


async def test_a_changed_item_makes_the_claim_uncertain(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    item = await store.write(items.create_sync, "news", "feed", "guid-1", {"title": "a"}, now)
    assert item is not None
    work = await begin(store, now, item_id=item.id)
    await ledger.start_provider(store, work.id, now)
    # Refused, but not a no-op: the move to uncertain commits, holding the money.
    with pytest.raises(errors.Conflict, match="not the one the claim began with"):
        await ledger.complete(
            store, work.id, ledger.Actual(500, "req-1", USAGE), "another-hash", now
        )
    claim = await ledger.get(store, work.id)
    assert claim.state == ClaimState.UNCERTAIN
    assert (await budget_row(store, "global", "day", now)).held_micros == 1_000
    report = await ledger.report(store, now)
    assert [(u.claim_id, u.item_id, u.item_state) for u in report.uncertain] == [
        (work.id, item.id, "new")
    ]
    # The stored content changing behind the claim's back is caught the same way.
    other = await begin(store, now, key="k2", item_id=item.id)
    await ledger.start_provider(store, other.id, now)
    await store.write(
        lambda c: c.execute("UPDATE items SET content_hash = 'x' WHERE id = ?", (item.id,))
    )
    with pytest.raises(errors.Conflict, match="now stored"):
        await ledger.complete(
            store, other.id, ledger.Actual(500, "req-2", USAGE), item.content_hash, now
        )
    assert (await ledger.get(store, other.id)).state == ClaimState.UNCERTAIN


# --- recover and reconcile -----------------------------------------------------------------


async def test_recover_fails_expired_leases_in_batches_and_keeps_uncertain(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 100_000), OP, now)
    reserved = [await begin(store, now, key=f"r{i}", worst=100) for i in range(3)]
    started = [await begin(store, now, key=f"s{i}", worst=1_000) for i in range(2)]
    fresh = await begin(store, now, key="fresh", worst=10, lease=timedelta(hours=1))
    for work in started:
        await ledger.start_provider(store, work.id, now)
    later = now + LEASE
    first = await ledger.recover(store, later, batch=4)
    second = await ledger.recover(store, later, batch=4)
    assert (len(first), len(second)) == (4, 1)
    assert await ledger.recover(store, later, batch=4) == []
    states = {w.id: (await ledger.get(store, w.id)).state for w in [*reserved, *started, fresh]}
    assert [states[w.id] for w in reserved] == [ClaimState.RELEASED] * 3
    assert [states[w.id] for w in started] == [ClaimState.UNCERTAIN] * 2
    assert states[fresh.id] == ClaimState.RESERVED
    assert (await budget_row(store, "global", "day", later)).held_micros == 2_010
    history = await events.for_entity(store, "claim", started[0].id)
    assert (history[-1].to_state, history[-1].actor) == ("uncertain", "sweep")


async def test_reconcile_needs_evidence_and_an_uncertain_claim(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    work = await begin(store, now, worst=1_000)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition, match="only an uncertain claim"):
        await ledger.reconcile(store, work.id, ledger.Actual(0, "dashboard"), OP, now)
    assert await snapshot.tables(store) == unchanged
    await ledger.start_provider(store, work.id, now)
    await ledger.fail(store, work.id, "connection reset", now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(ValueError, match="evidence must be a non-empty text"):
        await ledger.reconcile(store, work.id, ledger.Actual(0, " "), OP, now)
    assert await snapshot.tables(store) == unchanged
    result = await ledger.reconcile(
        store, work.id, ledger.Actual(900, "provider dashboard: req-9 cost $0.0009"), OP, now
    )
    assert (result.claim.state, result.claim.actual_micros) == (ClaimState.SETTLED, 900)
    row = await budget_row(store, "global", "day", now)
    assert (row.spent_micros, row.held_micros) == (900, 0)
    assert (await ledger.reconcile(store, work.id, ledger.Actual(900, "again"), OP, now)).replayed
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="already settled at 900"):
        await ledger.reconcile(store, work.id, ledger.Actual(901, "other figure"), OP, now)
    assert await snapshot.tables(store) == unchanged
    last = (await events.for_entity(store, "claim", work.id))[-1]
    assert (last.from_state, last.to_state, last.actor) == ("uncertain", "settled", OP)
    assert (await events.verify_chain(store)).ok


# --- money across periods, overruns and alerts ---------------------------------------------


async def test_a_claim_settles_into_the_period_that_authorized_it(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    evening = now.replace(hour=23, minute=55)
    work = await begin(store, evening, worst=1_000, lease=timedelta(hours=1))
    await ledger.start_provider(store, work.id, evening)
    tomorrow = evening + timedelta(minutes=10)
    await ledger.complete(store, work.id, ledger.Actual(800, "req", USAGE), None, tomorrow)
    assert (await budget_row(store, "global", "day", evening)).spent_micros == 800
    fresh = await budget_row(store, "global", "day", tomorrow)
    assert (fresh.spent_micros, fresh.held_micros, fresh.limit_micros) == (0, 0, 10_000)


async def test_thresholds_queue_one_alert_each_per_period(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000), OP, now)

    async def spend(key: str, worst: int, actual: int, at: datetime) -> None:
        work = await begin(store, at, key=key, worst=worst)
        await ledger.start_provider(store, work.id, at)
        await ledger.complete(store, work.id, ledger.Actual(actual, f"req-{key}", USAGE), None, at)

    await spend("a", 400, 499, now)  # overrun: 499 > 400 held
    assert await alerts(store) == [
        {
            "level": "error",
            "about": "claim_overrun",
            "facts": {"claim_id": 1, "held_micros": 400, "cost_micros": 499},
        }
    ]
    await spend("b", 300, 1, now)  # 50% reached exactly
    await spend("c", 300, 1, now)  # still 50%: no second alert
    await spend("d", 499, 499, now)  # 501 -> 1000: crosses 80% and 100% at once
    found = await alerts(store)
    assert [(a["about"], a["facts"]["pct"]) for a in found[1:]] == [
        ("budget_threshold", 50),
        ("budget_threshold", 80),
        ("budget_threshold", 100),
    ]
    assert found[-1]["facts"] == {
        "budget": f"global/day from {now:%Y-%m-%d}",
        "pct": 100,
        "spent_micros": 1_000,
        "limit_micros": 1_000,
        "held_micros": 0,
    }
    levels = await store.read(
        lambda c: [
            json.loads(r[0])["level"] for r in c.execute("SELECT payload FROM outbox ORDER BY id")
        ]
    )
    assert levels == ["error", "warning", "warning", "error"]
    tomorrow = now + timedelta(days=1)
    await spend("e", 600, 600, tomorrow)
    assert len(await alerts(store)) == 5  # a new period alerts again


async def test_report_ranks_pipelines_by_spend(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "month", 100_000), OP, now)
    for pipeline, actual in (("news", 300), ("digest", 900), ("alerts", 0)):
        work = await begin(store, now, key=pipeline, pipeline=pipeline, worst=1_000)
        await ledger.start_provider(store, work.id, now)
        await ledger.complete(store, work.id, ledger.Actual(actual, "req", USAGE), None, now)
    await begin(store, now, key="pending", pipeline="alerts", worst=2_000)
    report = await ledger.report(store, now)
    assert [(p.pipeline, p.spent_micros, p.held_micros, p.claims) for p in report.pipelines] == [
        ("digest", 900, 0, 1),
        ("news", 300, 0, 1),
        ("alerts", 0, 2_000, 2),
    ]
    (row,) = report.budgets
    assert (row.spent_micros, row.held_micros, row.remaining_micros) == (1_200, 2_000, 96_800)
    assert row.pct_used == pytest.approx(1.2)
    assert row.spent_micros + row.held_micros + row.remaining_micros == row.limit_micros
