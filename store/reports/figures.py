"""Aggregate figures for the metrics endpoint and the charts: counts by state, sums of
runs, pending outbox rows, spend per day. Every query on a big table is an index range.

    snap = await figures.snapshot(store, ["news"], now)   # what /metrics reports
    days = await figures.spend_by_day(store, since)  # /budget chart
    week = await figures.week(store, since)          # /status chart
"""

from __future__ import annotations

import collections
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from store import backend, clock, items, sql
from store.backends.core import Store
from store.items import machine
from store.ledger import budgets
from store.ledger import machine as ledger_machine

Q = sql.load("figures")

#: Events read at most for approval times (the newest ones): bounds a chart's query.
APPROVAL_LOOKBACK_EVENTS = 200_000


@dataclass(frozen=True)
class RunTotals:
    runs: int
    fetched: int
    new: int
    drafted: int
    failed: int


@dataclass(frozen=True)
class Snapshot:
    #: (pipeline, state) -> items
    items: dict[tuple[str, str], int]
    #: (pipeline, status) -> finished runs and their summed counts
    runs: dict[tuple[str, str], RunTotals]
    #: kind -> (pending rows, seconds the oldest has waited)
    outbox: dict[str, tuple[int, float]]
    #: (state, pipeline) -> claims
    claims: dict[tuple[str, str], int]
    #: state -> items past their SLA warning, not yet past the deadline
    sla_warned: dict[str, int]
    budgets: list[budgets.Budget] = field(default_factory=list)


def _per_state(
    conn: backend.Conn, query: str, pipelines: Collection[str], states: Iterable[str]
) -> dict[tuple[str, str], int]:
    """(pipeline, state) -> rows, one index range each: the cost grows with the rows
    counted, never with the rest of the table."""
    found = {}
    for state in states:
        for pipeline in pipelines:
            params = {"pipeline": pipeline, "state": state}
            found[(pipeline, state)] = int(conn.execute(query, params).fetchone()[0])
    return found


def snapshot_sync(conn: backend.Conn, pipelines: Collection[str], now: datetime) -> Snapshot:
    """The figures of `pipelines` (the configured ones: label values stay bounded)."""
    at = clock.to_ms(now)
    runs = {
        (row[0], row[1]): RunTotals(*(int(n or 0) for n in row[2:]))
        for row in conn.execute(Q["runs_by_outcome"])
    }
    outbox = {
        row[0]: (int(row[1]), max(0.0, (at - int(row[2])) / 1000))
        for row in conn.execute(Q["outbox_pending"])
    }
    warned = conn.execute(Q["sla_warned"], {"now": at, **items.warn_params()})
    return Snapshot(
        items=_per_state(conn, Q["items_in_state"], pipelines, machine.STATES),
        runs=runs,
        outbox=outbox,
        claims={
            (state, pipeline): n
            for (pipeline, state), n in _per_state(
                conn, Q["claims_in_state"], pipelines, ledger_machine.STATES
            ).items()
        },
        sla_warned=dict(collections.Counter(row[0] for row in warned)),
        budgets=budgets.current_sync(conn, now),
    )


async def snapshot(store: Store, pipelines: Collection[str], now: datetime) -> Snapshot:
    return await store.read(snapshot_sync, pipelines, now)


@dataclass(frozen=True)
class DaySpend:
    scope: str
    day: datetime
    spent_micros: int
    limit_micros: int


async def spend_by_day(store: Store, since: datetime) -> list[DaySpend]:
    """Each scope's day budgets from `since` on, oldest first (days nothing was held
    in have no row)."""
    params = {"since": clock.to_ms(since)}
    rows = await store.read(lambda conn: conn.execute(Q["spend_by_day"], params).fetchall())
    return [DaySpend(row[0], clock.from_ms(row[1]), int(row[2]), int(row[3])) for row in rows]


@dataclass(frozen=True)
class Week:
    #: (UTC day number, status) -> runs started that day
    runs: dict[tuple[int, str], int]
    #: (UTC day number, seconds an approved or rejected item waited)
    waits: list[tuple[int, float]]


def week_sync(conn: backend.Conn, since: datetime) -> Week:
    at = clock.to_ms(since)
    runs = {(int(r[0]), r[1]): int(r[2]) for r in conn.execute(Q["runs_by_day"], {"since": at})}
    last = int(conn.execute(Q["last_event"]).fetchone()[0])
    first_id = max(last - APPROVAL_LOOKBACK_EVENTS, _first_event_at(conn, at, last) - 1)
    waits = conn.execute(Q["approval_waits"], {"since": at, "first_id": first_id})
    return Week(runs, [(int(r[0]), int(r[1]) / 1000) for r in waits])


def _first_event_at(conn: backend.Conn, at: int, last: int) -> int:
    """The first event id written at or after `at`, by bisection over ids (events are
    appended in time order): a few primary-key lookups instead of a pass over the log."""
    low, high = 1, last + 1
    while low < high:
        middle = (low + high) // 2
        row = conn.execute(Q["event_time"], {"id": middle}).fetchone()
        if row is None or int(row[1]) >= at:
            high = middle
        else:
            low = int(row[0]) + 1
    return low


async def week(store: Store, since: datetime) -> Week:
    return await store.read(week_sync, since)
