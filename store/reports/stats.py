"""The editor's numbers: per pipeline over a window, what its entries became, how long
a card waited for a decision, and what an approved post cost in AI calls.

    found = await stats.pipeline(store, "news", since, until)   # /stats, gatehouse stats

Counts come from the items' events in the window, so a day's figures do not change when
an item moves on later: `carded` counts entries into awaiting_approval from drafting,
`approved` / `rejected` / `expired` the moves out of it, `undone` the decisions taken back.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from datetime import datetime

from store import backend, clock, sql
from store.backends.core import Store
from store.items.machine import State

Q = sql.load("stats")

#: Reject reasons listed at most, the most frequent first.
TOP_REASONS = 5


@dataclass(frozen=True)
class Stats:
    pipeline: str
    since: datetime
    until: datetime
    entries: int = 0
    filtered: int = 0
    skipped: int = 0
    carded: int = 0
    approved: int = 0
    rejected: int = 0
    expired: int = 0
    undone: int = 0
    #: (reason, count), the most frequent first; "no reason" when none was given.
    reject_reasons: list[tuple[str, int]] = field(default_factory=list)
    #: Seconds from card to decision: the median and the 90th percentile (None: no decision).
    median_wait_s: float | None = None
    p90_wait_s: float | None = None
    #: Settled AI spend of the claims begun in the window (triage and drafts, rejected too).
    spend_micros: int = 0
    #: Approved of decided (approved + rejected); None before any decision.
    approval_rate: float | None = None
    #: All the window's AI spend over its approved posts; None with none approved.
    spend_per_approved_micros: int | None = None


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile (`share` of 1): a value that was actually observed."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(len(ordered) * share)) - 1]


def reason_of(recorded: str | None) -> str:
    """A reject's reason without who rejected: `rejected by operator:42: tone` -> `tone`."""
    if not recorded or ": " not in recorded:
        return "no reason"
    return recorded.split(": ", 1)[1]


def pipeline_sync(conn: backend.Conn, name: str, since: datetime, until: datetime) -> Stats:
    params = {"pipeline": name, "since": clock.to_ms(since), "until": clock.to_ms(until)}
    moves = {(row[0], row[1]): int(row[2]) for row in conn.execute(Q["moves"], params)}

    def into(state: State, source: State | None = None) -> int:
        return sum(n for (old, new), n in moves.items() if new == state and source in (None, old))

    reasons: collections.Counter[str] = collections.Counter()
    for row in conn.execute(Q["reject_reasons"], params):
        reasons[reason_of(row[0])] += int(row[1])
    waits = [int(row[0]) / 1000 for row in conn.execute(Q["decision_waits"], params) if row[0]]
    decided = (State.APPROVED, State.REJECTED)
    approved = into(State.APPROVED, State.AWAITING_APPROVAL)
    rejected = into(State.REJECTED, State.AWAITING_APPROVAL)
    spend = int(conn.execute(Q["spend"], params).fetchone()[0])
    return Stats(
        name,
        since,
        until,
        entries=int(conn.execute(Q["entries"], params).fetchone()[0]),
        filtered=into(State.FILTERED),
        skipped=into(State.SKIPPED),
        carded=into(State.AWAITING_APPROVAL, State.DRAFTING),
        approved=approved,
        rejected=rejected,
        expired=into(State.EXPIRED, State.AWAITING_APPROVAL),
        undone=sum(moves.get((s, State.AWAITING_APPROVAL), 0) for s in decided),
        reject_reasons=sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_REASONS],
        median_wait_s=percentile(waits, 0.5),
        p90_wait_s=percentile(waits, 0.9),
        spend_micros=spend,
        approval_rate=approved / (approved + rejected) if approved + rejected else None,
        spend_per_approved_micros=-(-spend // approved) if approved else None,
    )


async def pipeline(store: Store, name: str, since: datetime, until: datetime) -> Stats:
    """One pipeline's numbers over [since, until)."""
    return await store.read(pipeline_sync, name, since, until)
