"""Settling claims: complete() after the provider answered, reconcile() for uncertain ones.

A claim settles at most once: the compare-and-set UPDATE moves it to settled in
the same transaction that turns its holds into spend (held -= reserved, spent +=
actual, in every budget row it held against) and writes its one event. A repeat
with the same figures is a no-op that says so (`replayed`); a different figure is
a Conflict. Threshold and overrun alerts are queued in the same transaction.

If a provider charged more than the worst case held (it cannot, when the worst
case comes from max_tokens and a correct price), the actual figure is still the
truth and is spent; `overrun_micros` says so and an error alert is queued.

On PostgreSQL complete() is one statement when the claim is started and its item kept
its content (store/sql/postgres/ledger_settle.sql); otherwise, and on SQLite, it locks
the claim and goes statement by statement.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from store import backend, clock, errors, sql
from store.audit import events
from store.ledger import budgets, claims, slots
from store.ledger import outputs as llm_outputs
from store.ledger.machine import ClaimState
from store.ledger.prices import Usage

Q = sql.load("ledger_settle")

#: Longest evidence text kept (a provider request id, or what an operator checked).
MAX_EVIDENCE = 1000


@dataclass(frozen=True)
class Settlement:
    """The outcome of complete() or reconcile()."""

    claim: claims.Claim
    #: True when an identical settlement was already recorded: nothing changed.
    replayed: bool = False
    #: actual - reserved when the provider charged more than the worst case held.
    overrun_micros: int = 0
    #: Set when complete() found the item's content changed: the claim is now
    #: uncertain and nothing was settled (complete() raises Conflict with it).
    content_changed: str | None = None


@dataclass(frozen=True)
class Actual:
    """What a claim settles at: the cost, the evidence for it (the provider's request id,
    or what an operator checked), and the tokens the provider counted (complete() needs
    them; a reconcile from a bill has none)."""

    micros: int
    evidence: str
    usage: Usage | None = None


def counted(actual: Actual) -> Usage:
    """The tokens the provider counted, which complete() settles with."""
    if actual.usage is None:
        raise ValueError("complete() settles what the provider counted: the usage is required")
    return Usage(*actual.usage)


def _check_evidence(evidence: str) -> str:
    if not isinstance(evidence, str) or not evidence.strip() or len(evidence) > MAX_EVIDENCE:
        raise ValueError(
            "evidence must be a non-empty text of at most "
            f"{MAX_EVIDENCE} characters (the provider's request id, or what was checked)"
        )
    return evidence


def complete_sync(
    conn: backend.Conn,
    work_id: int,
    actual: Actual,
    item_content_hash: str | None,
    now: datetime,
    reply: llm_outputs.Reply | None = None,
) -> Settlement:
    """started -> settled with the actual cost, exactly once; `reply`, what the call gave,
    is kept with the claim (llm_outputs) in the same unit.

    The item's content hash (as stored now, and as the caller drafted it) must
    be the one the claim began with; otherwise the claim becomes uncertain and
    the result says so (it does not raise here, so that move commits).
    """
    claims.check_micros("actual_micros", actual.micros)
    _check_evidence(actual.evidence)
    usage = counted(actual)
    actual = Actual(actual.micros, actual.evidence, usage)
    params = {
        "id": work_id,
        "actual_micros": actual.micros,
        "evidence": actual.evidence,
        "usage": json.dumps(usage._asdict()),
        "item_hash": item_content_hash,
        "now": clock.to_ms(now),
        **(reply.params() if reply else dict.fromkeys(("text", "model", "request_id", "error"))),
    }
    chained = backend.fetch_chained(conn, Q["complete"], params, lambda row: row)
    if chained is not None:  # the common case, in one statement
        return _settled(conn, chained, now)
    if reply is not None:
        llm_outputs.keep_sync(conn, work_id, reply, now)
    claim = claims.lock_sync(conn, work_id)
    if claim.state == ClaimState.SETTLED:
        if (claim.actual_micros, claim.evidence, claim.usage) == (
            actual.micros,
            actual.evidence,
            usage,
        ):
            return Settlement(claim, replayed=True, overrun_micros=_overrun(claim))
        raise errors.Conflict(
            f"claim {work_id} is already settled at {claim.actual_micros} micros "
            f"(evidence {claim.evidence!r}); this completion says {actual.micros} "
            f"(evidence {actual.evidence!r})"
        )
    if claim.state != ClaimState.STARTED:
        hint = {
            ClaimState.RESERVED: "start_provider was never called, so nothing was spent",
            ClaimState.UNCERTAIN: "an operator settles it with reconcile() and evidence",
        }.get(claim.state, "it is finished")
        raise errors.IllegalTransition(f"claim {work_id} is {claim.state}: {hint}")
    changed = _content_change(conn, claim, item_content_hash)
    if changed:
        moved = claims.move_sync(conn, claim, ClaimState.UNCERTAIN, "system", now, changed)
        return Settlement(moved, content_changed=changed)
    return _settle(conn, claim, actual, "system", now)


def _settled(conn: backend.Conn, row: backend.Row, now: datetime) -> Settlement:
    """What complete()'s one statement settled: the alerts that go with it (an overrun,
    thresholds its spend crossed), queued in the same unit."""
    claim = claims.Claim.from_row(row)
    actual = claim.actual_micros or 0
    overrun = max(0, actual - claim.reserved_micros)
    if overrun:
        slots.grant_overrun_sync(conn, claim.id, actual)
        budgets.alert_overrun(conn, claim.id, claim.reserved_micros, actual, now)
    budgets.alert_settled_sync(conn, row["budgets"], now)
    return Settlement(claim, overrun_micros=overrun)


def _content_change(conn: backend.Conn, claim: claims.Claim, passed: str | None) -> str | None:
    if claim.item_id is None:
        return None
    stored = claims.item_hash_sync(conn, claim.item_id)
    for label, seen in (("now stored", stored), ("completed with", passed)):
        if seen != claim.item_hash:
            return (
                f"item {claim.item_id}'s content hash {label} ({seen}) is not the one the claim "
                f"began with ({claim.item_hash}); the hold stays until an operator reconciles it"
            )
    return None


def _overrun(claim: claims.Claim) -> int:
    return max(0, (claim.actual_micros or 0) - claim.reserved_micros)


def _settle(
    conn: backend.Conn, claim: claims.Claim, actual: Actual, actor: str, now: datetime
) -> Settlement:
    spent, usage = actual.micros, actual.usage
    overrun = max(0, spent - claim.reserved_micros)
    reason = f"actual {spent} of {claim.reserved_micros} micros held; evidence {actual.evidence}"
    if overrun:
        reason += f"; OVERRUN by {overrun} micros"
    params = {
        "id": claim.id,
        "from_state": claim.state,
        "actual_micros": spent,
        "evidence": actual.evidence,
        "usage": json.dumps(usage._asdict()) if usage else None,
        "reason": reason,
        "now": clock.to_ms(now),
    }
    settled = claims.one_sync(conn, Q["settle"], params)
    if settled is None:  # unreachable with one writer; the compare-and-set guard
        raise errors.Conflict(f"claim {claim.id} changed underneath its settlement")
    budgets.settle_sync(conn, claim.id, claim.reserved_micros, spent, now)
    if overrun:
        budgets.alert_overrun(conn, claim.id, claim.reserved_micros, spent, now)
    events.append(
        conn, "claim", claim.id, claim.state, ClaimState.SETTLED, actor, now, reason=reason
    )
    return Settlement(settled, overrun_micros=overrun)


def reconcile_sync(
    conn: backend.Conn, work_id: int, actual: Actual, actor: str, now: datetime
) -> Settlement:
    """uncertain -> settled with the figure the evidence shows (0 if never charged).

    Repeating a settlement with the same figure is a no-op; a different figure is
    a Conflict; any state other than uncertain or settled is refused.
    """
    claims.check_micros("actual_micros", actual.micros)
    _check_evidence(actual.evidence)
    events.check_actor(actor)
    claim = claims.lock_sync(conn, work_id)
    if claim.state == ClaimState.SETTLED:
        if claim.actual_micros == actual.micros:
            return Settlement(claim, replayed=True, overrun_micros=_overrun(claim))
        raise errors.Conflict(
            f"claim {work_id} is already settled at {claim.actual_micros} micros; "
            f"reconcile says {actual.micros}"
        )
    if claim.state != ClaimState.UNCERTAIN:
        raise errors.IllegalTransition(
            f"claim {work_id} is {claim.state}; only an uncertain claim can be reconciled"
        )
    return _settle(conn, claim, actual, actor, now)
