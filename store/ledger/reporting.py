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
class UncertainHold:
    """A hold whose provider call may have been charged: reconcile it with evidence."""

    claim_id: int
    pipeline: str
    item_id: int | None
    item_state: str | None
    reserved_micros: int
    reason: str | None
    started_at: datetime | None
    since: datetime

    @classmethod
    def from_row(cls, row: backend.Row) -> UncertainHold:
        return cls(
            claim_id=row["id"],
            pipeline=row["pipeline"],
            item_id=row["item_id"],
            item_state=row["item_state"],
            reserved_micros=row["reserved_micros"],
            reason=row["reason"],
            started_at=clock.maybe_from_ms(row["started_at"]),
            since=clock.from_ms(row["updated_at"]),
        )


@dataclass(frozen=True)
class PipelineSpend:
    pipeline: str
    spent_micros: int
    held_micros: int
    claims: int

    @classmethod
    def from_row(cls, row: backend.Row) -> PipelineSpend:
        return cls(row["pipeline"], row["spent_micros"], row["held_micros"], row["claims"])


@dataclass(frozen=True)
class Report:
    budgets: list[budgets.Budget]
    uncertain: list[UncertainHold]
    #: Ranked by spend in the current UTC month (claims counted where they began).
    pipelines: list[PipelineSpend]


def _rows(conn: backend.Conn, query: str, params: dict[str, object]) -> list[backend.Row]:
    cursor = conn.execute(query, params)
    return cursor.fetchall()


def uncertain_sync(conn: backend.Conn, limit: int = 50) -> list[UncertainHold]:
    return [UncertainHold.from_row(row) for row in _rows(conn, Q["uncertain"], {"limit": limit})]


async def uncertain(store: Store, limit: int = 50) -> list[UncertainHold]:
    """Holds waiting for an operator's settlement, at most `limit`."""
    return await store.read(uncertain_sync, limit)


def pipelines_by_spend_sync(
    conn: backend.Conn, now: datetime, period: budgets.Period = "month"
) -> list[PipelineSpend]:
    since = clock.to_ms(budgets.period_start(period, now))
    return [
        PipelineSpend.from_row(r) for r in _rows(conn, Q["pipelines_by_spend"], {"since": since})
    ]


def report_sync(conn: backend.Conn, now: datetime, uncertain_limit: int = 50) -> Report:
    return Report(
        budgets.current_sync(conn, now),
        uncertain_sync(conn, uncertain_limit),
        pipelines_by_spend_sync(conn, now),
    )
