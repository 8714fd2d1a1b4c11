"""The budget ledger: reserve the worst case, authorize one provider call, settle once.

    await ledger.set_budget(store, ledger.Limit("global", "month", 50_000_000), actor, now)
    worst = prices.worst_case(price, max_input_tokens=8_000, max_tokens=1_024)
    call = ledger.Call(key, "drafts.create", request, worst, "news", item.id,
                       lease=timedelta(minutes=10))
    work = await ledger.begin(store, call, now)
    if work.provider_allowed and work.state == ClaimState.RESERVED:
        await ledger.start_provider(store, work.id, now)     # the one gate
        ... call the provider (never inside the store) ...
        spent = ledger.Actual(prices.cost(usage, price), request_id, usage)
        await ledger.complete(store, work.id, spent, item.content_hash, later)
    # on an error:   await ledger.fail(store, work.id, "timeout", later)
    # periodically:  await ledger.recover(store, now, batch=100)
    # an operator:   await ledger.reconcile(store, work.id, ledger.Actual(1234, "invoice line 7"),
    #                                     actor, now)
    #   or many:     await store.write(uncertain.settle_sync, ids, "zero", evidence, actor, now)
    report = await ledger.report(store, now)                  # what /budget shows

Money is integer micros (1 USD = 1_000_000). The parts, each under its own noun:
store/ledger/prices.py (what a call costs), store/ledger/budgets.py (limits, period rows,
threshold alerts), store/ledger/claims.py (begin, start_provider, fail, recover),
store/ledger/settle.py (complete, reconcile), store/ledger/uncertain.py (uncertain claims by
the episode: one alert, one settlement of many), store/ledger/machine.py (the claim
states and why), store/ledger/reporting.py (the /budget queries). Each function
here is one write unit (one BEGIN IMMEDIATE transaction) or one read.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from store import backend, errors
from store.backends.core import Store
from store.ledger import budgets, claims
from store.ledger import reporting as ledger_report
from store.ledger import settle as ledger_settle
from store.ledger import uncertain as ledger_uncertain
from store.ledger.machine import ClaimState

Budget = budgets.Budget
Limit = budgets.Limit
Claim = claims.Claim
Call = claims.Call
Work = claims.Work
Settlement = ledger_settle.Settlement
Actual = ledger_settle.Actual
Report = ledger_report.Report


async def set_budget(store: Store, limit: Limit, actor: str, now: datetime) -> Budget:
    """Configure a scope's day or month limit (an event with its actor); returns today's row."""
    return await store.write(budgets.set_budget_sync, limit, actor, now)


async def begin(store: Store, call: Call, now: datetime) -> Work:
    """Find or create the one work for this key; hold the worst case in every budget.

    Same key and request: the same work (`replayed`). Same key, other request:
    Conflict. No budget for the pipeline nor global: work with provider_allowed
    false. Not enough left anywhere: BudgetExceeded naming the scope and period.
    """
    return await store.write(claims.begin_sync, call, now)


async def start_provider(store: Store, work_id: int, now: datetime) -> Claim:
    """Authorize the provider call; only a committed 'started' authorizes it."""
    return await store.write(claims.start_provider_sync, work_id, now)


async def complete(
    store: Store, work_id: int, actual: Actual, item_content_hash: str | None, now: datetime
) -> Settlement:
    """Settle once; raises Conflict (after committing 'uncertain') if the item changed."""
    result = await store.write(ledger_settle.complete_sync, work_id, actual, item_content_hash, now)
    if result.content_changed:
        raise errors.Conflict(result.content_changed)
    return result


async def fail(store: Store, work_id: int, reason: str, now: datetime) -> Claim:
    """Before start_provider: hold released. After it: uncertain (it may have been charged)."""
    return await store.write(claims.fail_sync, work_id, reason, now)


async def recover(store: Store, now: datetime, batch: int = 100) -> list[Claim]:
    """Fail one bounded batch of expired leases; call again while it returns `batch` claims.
    Also alerts the budget thresholds reached by settlements made at once, and, once the
    batch was the last, the uncertain claims no alert named yet, in one alert."""

    def unit(conn: backend.Conn) -> list[Claim]:
        failed = claims.recover_sync(conn, now, batch)
        if len(failed) < batch:
            ledger_uncertain.announce_sync(conn, now)
        return failed

    return await store.write(unit)


async def reconcile(
    store: Store, work_id: int, actual: Actual, actor: str, now: datetime
) -> Settlement:
    """Settle an uncertain claim with the figure its evidence shows (an operator action),
    and let the item that waited behind it go on (ledger_uncertain.reconcile_sync)."""
    return await store.write(ledger_uncertain.reconcile_sync, work_id, actual, actor, now)


#: The lease of a charge: it is reserved, started and settled in the same unit.
CHARGE_LEASE = timedelta(minutes=1)
#: The endpoint of every charge (spend a dry run recorded after the fact); a charge's key
#: is hashed with it, so it stays as it is.
CHARGE_ENDPOINT = "llm.dry-run"


async def charge(
    store: Store, key: str, pipeline: str, actual: Actual, now: datetime
) -> Claim | None:
    """Count spend made elsewhere (a dry run's drafts, paid through a throwaway ledger)
    against this store's budgets: one claim without an item, held, started and settled
    in one unit. None when no budget covers the pipeline; BudgetExceeded (and nothing
    written) when it no longer fits. The same key again is the same claim."""

    def unit(conn: backend.Conn) -> Claim | None:
        micros = actual.micros
        request = {"micros": micros, "usage": list(ledger_settle.counted(actual))}
        call = claims.Call(key, CHARGE_ENDPOINT, request, micros, pipeline, None, CHARGE_LEASE)
        work = claims.begin_sync(conn, call, now)
        if not work.provider_allowed:
            return None
        if work.state == ClaimState.RESERVED:
            claims.start_provider_sync(conn, work.id, now)
        return ledger_settle.complete_sync(conn, work.id, actual, None, now).claim

    return await store.write(unit)


async def get(store: Store, work_id: int) -> Claim:
    return await store.read(claims.get_sync, work_id)


async def report(store: Store, now: datetime, uncertain_limit: int = 50) -> Report:
    """Everything /budget shows, read in one snapshot."""

    def query(conn: backend.Conn) -> Report:
        conn.execute("BEGIN")  # one read transaction, so the three parts agree
        try:
            return ledger_report.report_sync(conn, now, uncertain_limit)
        finally:
            conn.execute("COMMIT")

    return await store.read(query)
