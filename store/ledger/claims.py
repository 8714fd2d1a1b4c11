"""Budget claims: the rows, begin (reserve), start_provider (the gate), fail, recover.

Callers use the async API in store/ledger/__init__.py; these `*_sync` functions run inside
a write unit. Settling (complete, reconcile) lives in store/ledger/settle.py.

Providers do not deduplicate retried generations, so this is the only place that
can. The idempotency key is hashed with the endpoint; a replay of begin() with
the same key and request returns the same work (never a new id), and the same
key with a different request is a Conflict. A key is spent once: after its work
was released or settled, a retry needs a new key. Every transition writes one
'claim' event in the same transaction. The states: store/ledger/machine.py.

On PostgreSQL begin and start_provider are one statement each where they can
(store/sql/postgres/claims.sql); the statement-by-statement way here is SQLite's, and
PostgreSQL's when a slot needs room, the key has work, or the claim may not start.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Self

from store import backend, clock, errors, sql
from store.audit import events
from store.backends.writer import savepoint
from store.ledger import budgets
from store.ledger import machine as lm
from store.ledger.machine import ClaimState
from store.ledger.prices import Usage

Q = sql.load("claims")


@dataclass(frozen=True)
class Claim(backend.Record):
    id: int
    pipeline: str
    item_id: int | None
    item_hash: str | None
    state: ClaimState
    provider_allowed: bool
    reserved_micros: int
    actual_micros: int | None
    lease_until: datetime
    evidence: str | None
    usage: Usage | None
    reason: str | None
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    request_digest: str

    @classmethod
    def from_row(cls, row: backend.Row, /, **given: Any) -> Self:
        usage = json.loads(row["usage"]) if row["usage"] else None
        found = Usage(usage["input_tokens"], usage["output_tokens"]) if usage else None
        return super().from_row(row, usage=found, **given)


@dataclass(frozen=True)
class Work:
    """What begin() hands back: the one work id for this key, and what it may do."""

    id: int
    state: ClaimState
    provider_allowed: bool
    lease_until: datetime
    reserved_micros: int
    #: True when this key already had work: nothing was written by this call.
    replayed: bool

    @classmethod
    def of(cls, claim: Claim, replayed: bool) -> Work:
        return cls(
            claim.id,
            claim.state,
            claim.provider_allowed,
            claim.lease_until,
            claim.reserved_micros,
            replayed,
        )


def idem_hash(endpoint: str, key: str) -> str:
    """sha256("<endpoint>\\x00<key>"): the same key on two endpoints is two keys."""
    return hashlib.sha256(f"{endpoint}\x00{key}".encode()).hexdigest()


def request_digest(pipeline: str, item_id: int | None, request: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of what is asked (pipeline and item included)."""
    try:
        canonical = json.dumps(
            {"pipeline": pipeline, "item_id": item_id, "request": request},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"the request must be plain JSON data (dict, list, str, number): {exc}"
        ) from exc
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_micros(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number of micros >= 0, got {value!r}")
    return value


def one_sync(conn: backend.Conn, query: str, params: dict[str, Any]) -> Claim | None:
    """Run a query that returns at most one claims row."""
    return backend.fetch_one(conn, query, params, Claim.from_row)


def get_sync(conn: backend.Conn, claim_id: int) -> Claim:
    claim = one_sync(conn, Q["get"], {"id": claim_id})
    if claim is None:
        raise errors.NotFound(f"no budget claim {claim_id}")
    return claim


def lock_sync(conn: backend.Conn, claim_id: int) -> Claim:
    """The claim, its row locked until the unit ends (see items.lock_sync): a second
    settlement waits for the first and then reads it settled."""
    claim = one_sync(conn, Q["lock"], {"id": claim_id})
    if claim is None:
        raise errors.NotFound(f"no budget claim {claim_id}")
    return claim


def by_key_sync(conn: backend.Conn, endpoint: str, key: str) -> Claim | None:
    """The claim begun under this idempotency key, if any (nothing is written)."""
    return one_sync(conn, Q["by_idem"], {"idem_hash": idem_hash(endpoint, key)})


def item_hash_sync(conn: backend.Conn, item_id: int) -> str:
    """The item's content hash as stored now."""
    row = conn.execute(Q["item_hash"], {"id": item_id}).fetchone()
    if row is None:
        raise errors.NotFound(f"no item {item_id} for a budget claim")
    return str(row[0])


@dataclass(frozen=True)
class Call:
    """A provider call to reserve for: its idempotency key on its endpoint, what it asks
    (hashed with its pipeline and item), the worst case it may cost, and how long the
    reservation holds before the provider must be started."""

    key: str
    endpoint: str
    request: dict[str, Any]
    worst_case_micros: int
    pipeline: str
    item_id: int | None
    lease: timedelta


def begin_sync(conn: backend.Conn, call: Call, now: datetime) -> Work:
    """Find or create the work for an idempotency key; see the module docstring.

    Holds go to every (scope, period) with a configured limit among the pipeline
    and global, in the current UTC day and month. Only when neither scope has
    any limit is the work created unbudgeted (provider_allowed false).
    """
    key, endpoint, pipeline, item_id = call.key, call.endpoint, call.pipeline, call.item_id
    if not key or not endpoint:
        raise ValueError("an idempotency key and an endpoint are both required")
    if budgets.check_scope(pipeline) == budgets.GLOBAL:
        raise ValueError("'global' is the budget scope of all pipelines, not a pipeline name")
    check_micros("worst_case_micros", call.worst_case_micros)
    if call.lease <= timedelta(0):
        raise ValueError(f"the lease must be positive, got {call.lease}")
    idem, digest = idem_hash(endpoint, key), request_digest(pipeline, item_id, call.request)
    new = _New(idem, digest, call.worst_case_micros, pipeline, item_id, call.lease)
    begun = _begin_chained(conn, new, now)
    if begun is not None:
        return Work.of(begun, replayed=False)
    existing = one_sync(conn, Q["by_idem"], {"idem_hash": idem})
    if existing is None:
        with savepoint(conn, "begin_claim"):  # a BudgetExceeded leaves nothing behind
            created = _create(conn, new, now)
        if created is not None:
            return Work.of(created, replayed=False)
        # Another writer began this key between the look above and the insert.
        existing = one_sync(conn, Q["by_idem"], {"idem_hash": idem})
        assert existing is not None, "the insert met this key's row"
    if existing.request_digest != digest:
        raise errors.Conflict(
            f"idempotency key {key!r} on {endpoint} was used for a different request "
            f"(claim {existing.id}); use a new key for a new request"
        )
    return Work.of(existing, replayed=True)


@dataclass(frozen=True)
class _New:
    """A claim about to be created: its key's and request's hashes, what it holds, for whom."""

    idem: str
    digest: str
    worst: int
    pipeline: str
    item_id: int | None
    lease: timedelta


def _begin_chained(conn: backend.Conn, new: _New, now: datetime) -> Claim | None:
    """The new claim with its holds and event, in one statement, when this connection's
    slots have room for the hold and the key is new; None (nothing written) otherwise."""
    params = {
        "idem_hash": new.idem,
        "request_digest": new.digest,
        "pipeline": new.pipeline,
        "item_id": new.item_id,
        "micros": new.worst,
        "lease_until": clock.to_ms(now + new.lease),
        "no_budget": _no_budget(new.pipeline),
        "now": clock.to_ms(now),
        "day_start": clock.to_ms(budgets.period_start("day", now)),
        "month_start": clock.to_ms(budgets.period_start("month", now)),
    }
    return backend.fetch_chained(conn, Q["begin"], params, _fully_held)


def _fully_held(row: backend.Row) -> Claim:
    if row["held"] != row["pairs"]:  # its slots were locked with room: unreachable
        raise errors.StoreError(f"claim {row['id']} held {row['held']} of {row['pairs']} budgets")
    return Claim.from_row(row)


def _no_budget(pipeline: str) -> str:
    return f"no budget configured for {pipeline!r} or global: provider not allowed"


def _create(conn: backend.Conn, new: _New, now: datetime) -> Claim | None:
    """The new claim with its holds and event; None if the key's row exists already."""
    worst, pipeline, item_id = new.worst, new.pipeline, new.item_id
    item_hash = None if item_id is None else item_hash_sync(conn, item_id)
    pairs = budgets.configured_sync(conn, [pipeline, budgets.GLOBAL])
    state = ClaimState.RESERVED if pairs else ClaimState.UNBUDGETED
    reason = (
        f"holds {worst} micros in " + ", ".join(f"{s}/{p}" for s, p in pairs)
        if pairs
        else _no_budget(pipeline)
    )
    params = {
        "idem_hash": new.idem,
        "request_digest": new.digest,
        "pipeline": pipeline,
        "item_id": item_id,
        "item_hash": item_hash,
        "state": state,
        "provider_allowed": int(bool(pairs)),
        "reserved_micros": worst if pairs else 0,
        "lease_until": clock.to_ms(now + new.lease),
        "reason": reason,
        "now": clock.to_ms(now),
    }
    claim = one_sync(conn, Q["insert"], params)
    if claim is None:
        return None
    budgets.hold_sync(conn, claim.id, pairs, claim.reserved_micros, now)
    events.append(conn, "claim", claim.id, None, state, "system", now, reason=reason)
    return claim


def move_sync(
    conn: backend.Conn,
    claim: Claim,
    to: ClaimState,
    actor: str,
    now: datetime,
    reason: str | None,
) -> Claim:
    assert lm.allowed(claim.state, to), f"{claim.state} -> {to} is not in TRANSITIONS"
    params = {
        "id": claim.id,
        "from_state": claim.state,
        "to_state": to,
        "reason": reason,
        "now": clock.to_ms(now),
    }
    moved = one_sync(conn, Q["move"], params)
    if moved is None:  # unreachable with one writer; kept as the compare-and-set guard
        raise errors.Conflict(f"claim {claim.id} changed underneath this transition")
    # An uncertain claim is told with the others of its episode, by the next pass of
    # claim recovery (store/ledger/uncertain.py), not one alert each.
    events.append(conn, "claim", claim.id, claim.state, to, actor, now, reason=reason)
    return moved


def start_provider_sync(conn: backend.Conn, work_id: int, now: datetime) -> Claim:
    """The one gate: reserved -> started, only while the lease holds.

    A second call raises (it must not authorize a second provider call); so does
    an expired lease or a claim that never had a budget. Refusals change nothing.
    """
    reason = "provider call authorized"
    params = {"id": work_id, "reason": reason, "now": clock.to_ms(now)}
    started = backend.fetch_chained(conn, Q["start"], params, Claim.from_row)
    if started is not None:
        return started
    claim = lock_sync(conn, work_id)
    if not claim.provider_allowed:
        raise errors.IllegalTransition(
            f"claim {work_id} has no budget configured; the provider is not allowed "
            "(use the deterministic drafter)"
        )
    if claim.state != ClaimState.RESERVED:
        raise errors.IllegalTransition(
            f"claim {work_id} is {claim.state}; start_provider only authorizes a reserved "
            "claim, once"
        )
    if now >= claim.lease_until:
        raise errors.LeaseExpired(
            f"claim {work_id}'s lease expired at {claim.lease_until.isoformat()}; "
            "the provider call is not authorized (recover() will release the hold)"
        )
    return move_sync(conn, claim, ClaimState.STARTED, "system", now, reason)


def renew_sync(conn: backend.Conn, work_id: int, now: datetime, lease: timedelta) -> Claim:
    """Give a reserved claim a new lease, so a draft resumed after a crash may start it.

    Only `reserved` qualifies: no provider call was authorized yet, so the hold is
    simply kept longer (a reserved -> reserved event says so). Any other state is
    refused and nothing changes.
    """
    claim = lock_sync(conn, work_id)
    if claim.state != ClaimState.RESERVED:
        raise errors.IllegalTransition(
            f"claim {work_id} is {claim.state}; only a reserved lease renews"
        )
    params = {"id": work_id, "lease_until": clock.to_ms(now + lease), "now": clock.to_ms(now)}
    renewed = one_sync(conn, Q["renew"], params)
    assert renewed is not None  # checked reserved above, with one writer
    reason = f"lease renewed until {renewed.lease_until.isoformat()} to resume the draft"
    events.append(conn, "claim", work_id, claim.state, claim.state, "system", now, reason=reason)
    return renewed


def fail_sync(
    conn: backend.Conn, work_id: int, reason: str, now: datetime, actor: str = "system"
) -> Claim:
    """Before start_provider the hold is released; after it the claim becomes uncertain.

    Failing an uncertain, released or unbudgeted claim again changes nothing; a
    settled claim cannot fail (Conflict).
    """
    claim = lock_sync(conn, work_id)
    target = lm.ON_FAIL.get(claim.state)
    if target is None:
        if claim.state == ClaimState.SETTLED:
            raise errors.Conflict(f"claim {work_id} is already settled; it cannot fail")
        return claim
    if target == ClaimState.RELEASED:
        budgets.release_sync(conn, claim.id, claim.reserved_micros)
    return move_sync(conn, claim, target, actor, now, reason or "failed")


def recover_sync(conn: backend.Conn, now: datetime, batch: int) -> list[Claim]:
    """Fail up to `batch` claims whose lease expired, as fail() would; uncertain ones stay.
    Then alert the budget thresholds reached that no settlement saw (several at once)."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    params = {"now": clock.to_ms(now), "batch": batch}
    expired = backend.fetch_all(conn, Q["expired"], params, Claim.from_row)
    reason = "lease expired at {}"
    failed = [
        fail_sync(conn, c.id, reason.format(c.lease_until.isoformat()), now, "sweep")
        for c in expired
    ]
    budgets.alert_reached_sync(conn, now)
    return failed
