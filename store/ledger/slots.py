"""Budget slots: each writing connection holds and settles in a slot of its own.

    if not slots.hold_sync(conn, key, micros):    # key: scope, period, period_start
        ...                                        # too little left: nothing was held
    slots.settle_sync(conn, claim_id, actual, reserved)  # every hold of a claim, at once
    if not slots.set_limit_sync(conn, key, limit): # a lowered limit below what is used
        ...

Why: with several workers (PostgreSQL), every hold and settlement updating the one row
of a (scope, period) made each writer wait for the commit of the one before. Instead a
budget row grants its slots room (the escrow pattern), and a slot's holds and spend are
counted in the slot's row, summed on read (budgets.current_sync, as item_counts are).
A connection writes its own slot only (its backend pid on PostgreSQL, 0 on SQLite's one
writer), so two writers meet only when a slot needs more room: its first hold in each
budget and period, and the holds near the limit. Even then they wait only for each
other's grant: a unit that must lock the budget row runs in a transaction of its own,
never in a batch of other units that would hold the lock until all of them had run.

Why the budget is never overspent, whatever the slots, the crashes or the pauses:
- every slot keeps spent + held <= granted (a CHECK in the table): a hold is added only
  by a conditional UPDATE that checks it; a settlement or a release lowers spent + held
  (an overrun, a provider charging past the worst case, is granted with it);
- the budget row's granted_micros is the sum of its slots' grants, and changes only
  under the row's lock, by a grant that fits the limit, by room taken back, or by an
  overrun (spent past the limit is the truth, and alerted, as before the slots);
- so the sum of every slot's spent + held is at most granted, itself at most the limit.

Room left in a slot is nobody's spend: a slot short of room is granted a share of what
the budget has not granted yet, and when that is too little, first takes back what the
other slots leave unused (skipping any whose row another transaction holds locked, so
a paused worker never holds the others up): a dead worker's room goes back to the
living when the budget runs short, and its settled spend stays counted. A hold may be
settled or released by another connection than the one that took it (a claim resumed
by another worker, recovered by the sweep): that slot's held goes negative, and only
the sums mean anything.
"""

from __future__ import annotations

from typing import Any

from store import backend, errors, sql

Q = sql.load("budget_slots")
BQ = sql.load("budgets")

#: A slot short of room is granted this share of what the budget has not granted yet
#: (at least the hold): room for many holds at once, leaving most of it to the other
#: slots; near the limit the shares shrink, and slots take back each other's room.
GRANT_SHARE = 8

Key = dict[str, Any]


def hold_sync(conn: backend.Conn, key: Key, micros: int) -> bool:
    """Hold `micros` in this connection's slot of the budget row `key`, granting the slot
    more room when it has too little; False (nothing held) when the budget has too little
    left. The row must be configured (budget_limits)."""
    if conn.execute(Q["add_hold"], {**key, "micros": micros}).fetchone():
        return True
    budget = _lock_budget(conn, key)
    if budget is None:  # the period's first hold opens its row; opening it as a rule
        # would also wait on every writer that changed the row (its unique check)
        conn.execute(BQ["ensure_row"], key)
        budget = _lock_budget(conn, key)
    left = budget["limit_micros"] - budget["granted_micros"]
    taken = 0
    if left < micros:
        taken = _take_back(conn, key, Q["free_slots"])
        left += taken
    if left < micros:
        if taken:  # leave the room taken back with the budget row, for the next grant
            conn.execute(Q["add_granted"], {**key, "micros": -taken})
        return False
    granted = max(micros, left // GRANT_SHARE)
    conn.execute(Q["add_granted"], {**key, "micros": granted - taken})
    conn.execute(Q["grant_and_hold"], {**key, "granted": granted, "micros": micros})
    return True


def take_hold_back_sync(conn: backend.Conn, key: Key, micros: int) -> None:
    """Give back a hold_sync of this unit (the room stays in this connection's slot)."""
    conn.execute(Q["take_hold_back"], {**key, "micros": micros})


def settle_sync(conn: backend.Conn, claim_id: int, actual: int, reserved: int) -> None:
    """Every hold of the claim (`reserved` each) becomes `actual` spend in this
    connection's slot; 0 releases them. An overrun is granted in each budget row too."""
    conn.execute(Q["settle_holds"], {"claim_id": claim_id, "actual": actual})
    if actual > reserved:
        grant_overrun_sync(conn, claim_id, actual)


def grant_overrun_sync(conn: backend.Conn, claim_id: int, actual: int) -> None:
    """A settlement past the claim's holds granted its slot the overrun: count that grant
    in each budget row the claim held against."""
    rows = conn.execute(BQ["claim_holds"], {"claim_id": claim_id}).fetchall()
    for row in rows:
        key = {k: row[k] for k in ("scope", "period", "period_start")}
        conn.execute(Q["add_granted"], {**key, "micros": actual - row["micros"]})


def set_limit_sync(conn: backend.Conn, key: Key, limit_micros: int) -> bool:
    """Apply a new limit to an open row, only if what its slots use fits under it; a
    lowered limit first takes back every slot's unused room (waiting for locked slots)."""
    budget = _lock_budget(conn, key)
    taken = 0
    if budget["granted_micros"] > limit_micros:
        taken = _take_back(conn, key, Q["free_slots_waiting"])
    params = {**key, "limit_micros": limit_micros, "taken": taken}
    return conn.execute(Q["set_row_limit"], params).fetchone() is not None


def _lock_budget(conn: backend.Conn, key: Key) -> Any:
    """The budget row's limit and grants, the row locked until the unit commits. Other
    workers' grants queue on this lock: a unit sharing a batch asks to run alone first."""
    if backend.shares_transaction(conn):
        raise errors.RunAlone(f"locks the budget row {key['scope']}/{key['period']}")
    return conn.execute(Q["lock_budget"], key).fetchone()


def _take_back(conn: backend.Conn, key: Key, query: str) -> int:
    """Take the unused room of the slots `query` finds (and locks); the micros taken,
    which the caller (holding the budget row's lock) counts in the row."""
    free = [dict(row) for row in conn.execute(query, key).fetchall()]
    if free:
        conn.executemany(Q["take_back"], [{**key, **row} for row in free])
    return sum(row["free_micros"] for row in free)
