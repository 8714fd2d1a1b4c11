"""Budgets: configured limits and one row per scope per period instance, in micros.

    budgets.set_budget_sync(conn, budgets.Limit("global", "day", 5_000_000), actor, now)
    rows = budgets.current_sync(conn, now)   # inside units; callers use store/ledger/__init__.py

A scope is "global" or a pipeline's name; a period is a UTC day or a UTC month.
`budget_limits` holds what the operator configured; `budgets` holds one row per
(scope, period, period_start) with its limit, opened lazily by the first claim of
that period with the limit configured then. Its spent and held micros are counted in
its slots, one per writing connection, and summed on read (store/ledger/slots.py):
writers at once never wait on one row.

A claim holds against the period instances current at begin() and settles into
those same rows, even if it completes after midnight: the money is counted in
the period that authorized it. The ledger keeps spent + held <= limit for every
row; only a provider that charges more than the worst case (a pricing bug) can
push spent past it, and that is recorded as the truth and raised as an alert.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from store import backend, clock, errors, outbox, payloads, sql, units
from store.audit import events
from store.backends.writer import savepoint
from store.ledger import slots

Q = sql.load("budgets")

Period = Literal["day", "month"]
PERIODS: tuple[Period, ...] = get_args(Period)
GLOBAL = "global"

#: Shares of a limit whose crossing (by spend) queues one alert per period instance.
THRESHOLDS_PCT: tuple[int, ...] = (50, 80, 100)

_SCOPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")


def check_scope(scope: str) -> str:
    if not isinstance(scope, str) or not _SCOPE.match(scope):
        raise ValueError(
            f"invalid budget scope {scope!r}; valid: 'global' or a pipeline name "
            "(letters, digits, _ . : -, at most 100 characters)"
        )
    return scope


def check_period(period: str) -> Period:
    if period not in PERIODS:
        raise ValueError(f"unknown budget period {period!r}; valid: {', '.join(PERIODS)}")
    return period


def period_start(period: Period, now: datetime) -> datetime:
    """The UTC boundary where the period instance containing `now` began, whatever the
    server's time zone; an unknown period is a ValueError naming the valid ones."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    starts = {"day": day, "month": day.replace(day=1)}
    return starts[check_period(period)]


@dataclass(frozen=True)
class Budget(backend.Record):
    """One period instance of one scope's budget."""

    scope: str
    period: Period
    period_start: datetime
    limit_micros: int
    spent_micros: int
    held_micros: int

    @property
    def remaining_micros(self) -> int:
        """limit - spent - held; negative only after a provider overran its worst case."""
        return self.limit_micros - self.spent_micros - self.held_micros

    @property
    def pct_used(self) -> float:
        """Spent as a percentage of the limit (a zero limit with spend counts as 100)."""
        if self.limit_micros == 0:
            return 100.0 if self.spent_micros else 0.0
        return 100.0 * self.spent_micros / self.limit_micros

    @property
    def label(self) -> str:
        return f"{self.scope}/{self.period} from {units.day(self.period_start)}"


def _rows(conn: backend.Conn, query: str, params: dict[str, Any]) -> list[backend.Row]:
    cursor = conn.execute(query, params)
    return cursor.fetchall()


def _row(conn: backend.Conn, scope: str, period: str, start_ms: int) -> Budget:
    """A period instance's row, which its callers have opened (ensure_row)."""
    [found] = _rows(
        conn, Q["get_row"], {"scope": scope, "period": period, "period_start": start_ms}
    )
    return Budget.from_row(found)


@dataclass(frozen=True)
class Limit:
    """A scope's limit for one kind of period (a UTC "day" or "month"), in micros."""

    scope: str
    period: str
    micros: int


def set_budget_sync(conn: backend.Conn, limit: Limit, actor: str, now: datetime) -> Budget:
    """Configure a limit (an operator action: one 'budget' event with its actor).

    The limit applies to the period instance already open and to every later one.
    A limit below what this period already spent or holds is refused, with nothing
    written: it would break spent + held <= limit; setting exactly that figure stops
    new calls.
    """
    limit_micros = limit.micros
    scope, kind = check_scope(limit.scope), check_period(limit.period)
    if isinstance(limit_micros, bool) or not isinstance(limit_micros, int) or limit_micros < 0:
        raise ValueError(f"limit_micros must be a whole number >= 0, got {limit_micros!r}")
    start_ms = clock.to_ms(period_start(kind, now))
    before = _rows(conn, Q["get_limit"], {"scope": scope, "period": kind})
    old = before[0]["limit_micros"] if before else None
    params = {"scope": scope, "period": kind, "limit_micros": limit_micros}
    key = {"scope": scope, "period": kind, "period_start": start_ms}
    # The row's conditional UPDATE, under its lock, is the one check of what the slots
    # use (on PostgreSQL a hold may commit after any look from here); its refusal undoes
    # the limit's upsert.
    with savepoint(conn, "set_budget"):
        conn.execute(Q["upsert_limit"], {**params, "actor": actor, "now": clock.to_ms(now)})
        conn.execute(Q["ensure_row"], key)
        if not slots.set_limit_sync(conn, key, limit_micros):
            raise _below_use(_row(conn, scope, kind, start_ms))
    row = _row(conn, scope, kind, start_ms)
    conn.execute(Q["set_alerted"], {**key, "pct": max(_reached(row), default=0)})
    events.append(
        conn,
        "budget",
        f"{scope}/{kind}",
        None if old is None else f"limit:{old}",
        f"limit:{limit_micros}",
        actor,
        now,
        reason=f"{kind} limit {units.usd(limit_micros)} ({limit_micros} micros)",
    )
    return row


def _below_use(row: Budget) -> errors.Conflict:
    return errors.Conflict(
        f"{row.label} already has {row.spent_micros} micros spent and {row.held_micros} "
        f"held; the limit must be at least {row.spent_micros + row.held_micros} micros"
    )


def configured_sync(conn: backend.Conn, scopes: list[str]) -> list[tuple[str, Period]]:
    """The (scope, period) pairs among `scopes` that have a limit configured."""
    return [
        (row["scope"], row["period"])
        for row in _rows(conn, Q["limits_for"], {"scopes": json.dumps(scopes)})
    ]


def hold_sync(
    conn: backend.Conn,
    claim_id: int,
    pairs: list[tuple[str, Period]],
    micros: int,
    now: datetime,
) -> None:
    """Hold `micros` in the current instance of every pair, or raise and hold nothing.

    Each row is held in this connection's slot (slots.hold_sync), in the order given
    (configured_sync's, the same for every writer). When one row has too little left,
    the holds already taken go back before raising.
    """
    held: list[dict[str, Any]] = []
    for scope, period in pairs:
        start_ms = clock.to_ms(period_start(period, now))
        key = {"scope": scope, "period": period, "period_start": start_ms}
        if not slots.hold_sync(conn, key, micros):
            for earlier in held:  # the rows before this one: give them back
                slots.take_hold_back_sync(conn, earlier, micros)
            raise _exceeded(conn, scope, period, start_ms, micros)
        held.append(key)
    for key in held:
        conn.execute(Q["insert_claim_hold"], {**key, "micros": micros, "claim_id": claim_id})


def _exceeded(
    conn: backend.Conn, scope: str, period: Period, start_ms: int, micros: int
) -> errors.BudgetExceeded:
    row = _row(conn, scope, period, start_ms)
    return errors.BudgetExceeded(
        f"budget {row.label} has {max(0, row.remaining_micros)} micros left "
        f"(limit {row.limit_micros}, spent {row.spent_micros}, held {row.held_micros}); "
        f"this call needs up to {micros}",
        scope,
        period,
    )


def release_sync(conn: backend.Conn, claim_id: int, reserved: int) -> None:
    """Give every hold of a claim (`reserved` each) back to its budget."""
    slots.settle_sync(conn, claim_id, 0, reserved)


def settle_sync(
    conn: backend.Conn, claim_id: int, reserved: int, actual_micros: int, now: datetime
) -> None:
    """held -= reserved and spent += actual in every budget the claim held against.

    Thresholds crossed by this spend queue their alerts in the same transaction.
    """
    slots.settle_sync(conn, claim_id, actual_micros, reserved)
    alert_settled_sync(conn, _rows(conn, Q["claim_rows"], {"claim_id": claim_id}), now)


def alert_settled_sync(conn: backend.Conn, rows: list[backend.Row], now: datetime) -> None:
    """Alert the thresholds a settlement's spend crossed in `rows`, the budget rows its
    claim held against as they are with that spend (each with its `alerted_pct`)."""
    for row in rows:
        _alert_thresholds(conn, Budget.from_row(row), row["alerted_pct"], now)


def alert_reached_sync(conn: backend.Conn, now: datetime) -> None:
    """Alert the thresholds the current periods' spend reached and no settlement alerted
    (run by the claim sweep): settlements committed at once in other slots each see the
    spend without the others', and may all stay below a line that their sum passed."""
    for row in _rows(conn, Q["current"], _current_params(now)):
        _alert_thresholds(conn, Budget.from_row(row), row["alerted_pct"], now)


def _alert_thresholds(conn: backend.Conn, row: Budget, alerted_pct: int, now: datetime) -> None:
    """Alert each threshold the spend reached that no writer alerted yet: the row's
    alerted_pct, raised by one conditional UPDATE, makes exactly one writer alert it.

    Spend settled at once in other slots and not committed yet is not seen here; the
    next settlement, or else the claim sweep (alert_reached_sync), alerts it then.
    """
    for pct in _reached(row):
        if pct <= alerted_pct:
            continue
        if not _rows(conn, Q["mark_alerted"], {**_key(row), "pct": pct}):
            continue  # another writer alerted it meanwhile
        facts = {
            "budget": row.label,
            "pct": pct,
            "spent_micros": row.spent_micros,
            "limit_micros": row.limit_micros,
            "held_micros": row.held_micros,
        }
        key = f"budget:{row.scope}:{row.period}:{clock.to_ms(row.period_start)}:{pct}"
        level: payloads.Level = "error" if pct >= 100 else "warning"
        outbox.alert_sync(
            conn, payloads.Alert(about="budget_threshold", facts=facts, level=level), now, key=key
        )


def _reached(row: Budget) -> list[int]:
    """The thresholds the row's spend has reached (none with nothing spent)."""
    # Compare spent * 100 with limit * pct: integers only.
    return [
        pct
        for pct in THRESHOLDS_PCT
        if row.spent_micros > 0 and row.limit_micros * pct <= row.spent_micros * 100
    ]


def _key(row: Budget) -> dict[str, Any]:
    return {"scope": row.scope, "period": row.period, "period_start": clock.to_ms(row.period_start)}


def alert_overrun(
    conn: backend.Conn, claim_id: int, reserved: int, actual: int, now: datetime
) -> None:
    """A provider charged more than the worst case held: spend is the truth; say so."""
    facts = {"claim_id": claim_id, "held_micros": reserved, "cost_micros": actual}
    outbox.alert_sync(
        conn,
        payloads.Alert(about="claim_overrun", facts=facts),
        now,
        key=f"claim-overrun:{claim_id}",
    )


def current_sync(conn: backend.Conn, now: datetime) -> list[Budget]:
    return [Budget.from_row(row) for row in _rows(conn, Q["current"], _current_params(now))]


def _current_params(now: datetime) -> dict[str, Any]:
    return {
        "day_start": clock.to_ms(period_start("day", now)),
        "month_start": clock.to_ms(period_start("month", now)),
    }
