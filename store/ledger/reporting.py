"""The queries behind /budget: budgets, uncertain holds, spend by pipeline.

Read through `ledger.report(store, now)`; these run inside one read transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from store import backend, clock, sql
from store.backends.core import Store
from store.ledger import budgets

Q = sql.load("ledger_report")


@dataclass(frozen=True)
class UncertainHold(backend.Record):
    """A hold whose provider call may have been charged: reconcile it with evidence."""

    claim_id: int
    pipeline: str
    item_id: int | None
    item_state: str | None
    reserved_micros: int
    reason: str | None
    started_at: datetime | None
    since: datetime


@dataclass(frozen=True)
class PipelineSpend(backend.Record):
    pipeline: str
    spent_micros: int
    held_micros: int
    claims: int


@dataclass(frozen=True)
class Report:
    budgets: list[budgets.Budget]
    uncertain: list[UncertainHold]
    #: Ranked by spend in the current UTC month (claims counted where they began).
    pipelines: list[PipelineSpend]


def uncertain_sync(conn: backend.Conn, limit: int = 50) -> list[UncertainHold]:
    return backend.fetch_all(conn, Q["uncertain"], {"limit": limit}, UncertainHold.from_row)


async def uncertain(store: Store, limit: int = 50) -> list[UncertainHold]:
    """Holds waiting for an operator's settlement, at most `limit`."""
    return await store.read(uncertain_sync, limit)


def pipelines_by_spend_sync(
    conn: backend.Conn, now: datetime, period: budgets.Period = "month"
) -> list[PipelineSpend]:
    since = clock.to_ms(budgets.period_start(period, now))
    params = {"since": since}
    return backend.fetch_all(conn, Q["pipelines_by_spend"], params, PipelineSpend.from_row)


def report_sync(conn: backend.Conn, now: datetime, uncertain_limit: int = 50) -> Report:
    return Report(
        budgets.current_sync(conn, now),
        uncertain_sync(conn, uncertain_limit),
        pipelines_by_spend_sync(conn, now),
    )
