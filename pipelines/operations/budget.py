"""AI spend: the budget report, setting limits, settling uncertain claims (one, or many)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal, InvalidOperation

from pipelines.operations.inputs import Invalid
from store import items, ledger
from store.db import Store
from store.intake import timetable
from store.items.machine import State
from store.ledger import budgets
from store.ledger import settle as ledger_settle
from store.ledger import uncertain as ledger_uncertain

#: Where an item waiting behind a settled claim is now: its pipeline's next tick drafts it.
_GOES_ON = (State.DRAFTING, State.NEW)

#: The largest budget one command may set (USD): a typo guard, not a policy.
MAX_BUDGET_USD = Decimal(1_000_000)


async def budget(store: Store, now: datetime) -> ledger.Report:
    """Limits, spend, holds and uncertain holds, today and this month, in one snapshot."""
    return await ledger.report(store, now)


def parse_usd(amount: str) -> int:
    """A dollar amount ("12", "12.50", "$0.25") as integer micros; Invalid otherwise."""
    text = amount.strip().removeprefix("$").replace(",", "")
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise Invalid(f"amount {amount!r} is not a number; give USD like 25 or 12.50") from None
    if not value.is_finite() or value < 0 or value > MAX_BUDGET_USD:
        raise Invalid(f"amount {amount!r} must be between 0 and {MAX_BUDGET_USD:,} USD")
    micros = value * 1_000_000
    if micros != micros.to_integral_value():
        raise Invalid(f"amount {amount!r} has more than 6 decimal places")
    return int(micros)


async def set_budget(
    store: Store, scope: str, period: str, amount_usd: str, actor: str, now: datetime
) -> budgets.Budget:
    """Set a scope's day or month limit (an event with the actor); returns the current row."""
    try:
        budgets.check_scope(scope)
        budgets.check_period(period)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    limit = ledger.Limit(scope, period, parse_usd(amount_usd))
    return await ledger.set_budget(store, limit, actor, now)


async def reconcile_claim(
    store: Store, claim_id: int, amount_usd: str, evidence: str, actor: str, now: datetime
) -> ledger_settle.Settlement:
    """Settle an uncertain claim at the figure the provider's evidence shows.

    An item held in drafting by this claim goes on at its pipeline's next tick, which is
    asked for now: the drafter begins the draft's next try (store/ledger/uncertain.py).
    """
    if not evidence.strip():
        raise Invalid("evidence is required: e.g. the provider's request id or invoice line")
    micros = parse_usd(amount_usd)
    settled = await ledger.reconcile(store, claim_id, ledger.Actual(micros, evidence), actor, now)
    held = settled.claim.item_id
    if held is not None and (await items.get(store, held)).state in _GOES_ON:
        await timetable.request_run(store, settled.claim.pipeline, now)
    return settled


async def settle_uncertain(
    store: Store,
    at: str,
    evidence: str,
    actor: str,
    now: datetime,
    *,
    claim_ids: Sequence[int] | None = None,
    pipeline: str | None = None,
    before: datetime | None = None,
) -> ledger_uncertain.Settled:
    """Settle many uncertain claims in one transaction, at `zero` (not charged) or at
    `reserve` (charged the worst case held): those named, or those of `pipeline` that
    became uncertain before `before`. The CLI's --uncertain and an episode alert's
    buttons both come here. The items waiting behind them go on at their pipelines'
    next ticks, which are asked for now (the drafter begins the next try of the draft).
    """
    try:
        checked = ledger_uncertain.check_at(at)
    except ValueError as exc:
        raise Invalid(str(exc)) from None
    if not evidence.strip():
        raise Invalid("evidence is required: e.g. what the provider's console showed")
    done = await store.write(
        ledger_uncertain.settle_sync,
        checked,
        evidence,
        actor,
        now,
        claim_ids=claim_ids,
        pipeline=pipeline,
        before=before,
    )
    waiting = {s.claim.pipeline for s in done.settled if s.claim.item_id is not None}
    for name in sorted(waiting):
        await timetable.request_run(store, name, now)
    return done
