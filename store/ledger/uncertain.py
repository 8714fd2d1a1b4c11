"""Uncertain claims by the episode: one alert for those no alert named yet, and one
transaction that settles many at once.

    announced = await store.write(uncertain.announce_sync, now)    # claim recovery does it
    found = await store.read(uncertain.open_sync, "news", before)  # what would be settled
    done = await store.write(uncertain.settle_sync, "zero", "checked the console", actor,
                             now, claim_ids=ids)     # or pipeline=..., before=...

An episode is what one pass of claim recovery finds: the claims that became uncertain
(a stop or a crash cut their calls off, a timeout, a changed item) and that no alert
still kept in the outbox names. The leader runs that pass at start and every sweep, so
the calls one stop cut off, made uncertain by the restart's recovery and first tick, are
told in one alert ("14 calls were cut off … · $0.0024 held"). The alert row is the
episode's record: its facts list the claims, and its buttons name the row. A claim still
uncertain once retention forgot its alert is named again by the next pass.

Settling at `zero` (the provider did not charge) or `reserve` (it charged the worst case
held) goes through settle.reconcile_sync for each claim, in the caller's one unit; a
claim no longer uncertain is left as it is and counted apart, so a repeat changes nothing.
An item waiting in drafting behind a settled claim goes on at its next draft (the
drafter begins the next try); one the SLA dropped as a breach while it waited comes
back here, as a new attempt (`go_on_sync`): either way no /replay is needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from store import backend, clock, items, outbox, payloads, sql
from store.items.machine import State
from store.ledger import claims, reporting
from store.ledger import outputs as llm_outputs
from store.ledger import settle as ledger_settle

Q = sql.load("uncertain")

At = Literal["zero", "reserve"]
AT: tuple[At, ...] = ("zero", "reserve")
#: The dedupe key's prefix of an episode's alert (the query `announced` matches it).
KEY_PREFIX = "claims-uncertain:"
#: Claims one alert lists by id; an episode larger than this is told in several alerts.
MAX_PER_EPISODE = 200


@dataclass(frozen=True)
class Settled:
    """What one settlement of many did."""

    #: The claims settled now, with their settlements.
    settled: tuple[ledger_settle.Settlement, ...]
    #: Claims asked for that were no longer uncertain: left as they were.
    already: tuple[int, ...]
    #: Items the SLA dropped (breach) while they waited behind a claim settled now,
    #: brought back as a new attempt.
    replayed: tuple[int, ...] = ()

    @property
    def micros(self) -> int:
        return sum(s.claim.actual_micros or 0 for s in self.settled)


def check_at(at: str) -> At:
    if at not in AT:
        raise ValueError(f"settle at {at!r}? valid: zero (not charged), reserve (charged)")
    return at


def open_sync(
    conn: backend.Conn, pipeline: str | None = None, before: datetime | None = None
) -> list[reporting.UncertainHold]:
    """Every uncertain claim of `pipeline` that became uncertain before `before` (None: any)."""
    params = {"pipeline": pipeline, "before": None if before is None else clock.to_ms(before)}
    return backend.fetch_all(conn, Q["open"], params, reporting.UncertainHold.from_row)


def announced_sync(conn: backend.Conn) -> set[int]:
    """The claims named by an episode alert the outbox still keeps."""
    named: set[int] = set()
    for (payload,) in conn.execute(Q["announced"]).fetchall():
        named.update(json.loads(payload).get("facts", {}).get("claim_ids", ()))
    return named


def announce_sync(conn: backend.Conn, now: datetime) -> list[int]:
    """One alert for the uncertain claims no kept alert names; the ids of the alert rows."""
    found = open_sync(conn)
    if not found:
        return []  # the usual pass: no outbox read at all
    named = announced_sync(conn)
    fresh = [hold for hold in found if hold.claim_id not in named]
    return [
        row_id
        for start in range(0, len(fresh), MAX_PER_EPISODE)
        if (row_id := _alert(conn, fresh[start : start + MAX_PER_EPISODE], now)) is not None
    ]


def _alert(
    conn: backend.Conn, holds: Sequence[reporting.UncertainHold], now: datetime
) -> int | None:
    started = [h.started_at for h in holds if h.started_at is not None]
    facts = {
        "claim_ids": [h.claim_id for h in holds],
        "held_micros": sum(h.reserved_micros for h in holds),
        "pipelines": sorted({h.pipeline for h in holds}),
        "items": sum(1 for h in holds if h.item_id is not None),
        "reason": holds[0].reason,
        "first_started": clock.to_ms(min(started)) if started else None,
        "last_started": clock.to_ms(max(started)) if started else None,
    }
    key = f"{KEY_PREFIX}{holds[0].claim_id}:{clock.to_ms(now)}"
    return outbox.alert_sync(
        conn, payloads.Alert(about="claims_uncertain", facts=facts), now, key=key
    )


def settle_sync(
    conn: backend.Conn,
    at: At,
    evidence: str,
    actor: str,
    now: datetime,
    *,
    claim_ids: Iterable[int] | None = None,
    pipeline: str | None = None,
    before: datetime | None = None,
) -> Settled:
    """Settle, at 0 or at each one's reserve, in this unit, the uncertain claims named
    (`claim_ids`) or else those the filters find; a claim named that is no longer
    uncertain is counted in `already`, untouched."""
    check_at(at)
    still = {h.claim_id: h for h in open_sync(conn, pipeline, before)}
    wanted = sorted(still if claim_ids is None else set(claim_ids))
    settled = [
        ledger_settle.reconcile_sync(
            conn,
            claim_id,
            ledger_settle.Actual(0 if at == "zero" else still[claim_id].reserved_micros, evidence),
            actor,
            now,
        )
        for claim_id in wanted
        if claim_id in still
    ]
    already = tuple(claim_id for claim_id in wanted if claim_id not in still)
    replayed = [go_on_sync(conn, s.claim, actor, now) for s in settled]
    return Settled(tuple(settled), already, tuple(i for i in replayed if i is not None))


def reconcile_sync(
    conn: backend.Conn, claim_id: int, actual: ledger_settle.Actual, actor: str, now: datetime
) -> ledger_settle.Settlement:
    """One claim settled at the figure given (reconcile-claim <claim>), and its item let go on."""
    done = ledger_settle.reconcile_sync(conn, claim_id, actual, actor, now)
    if not done.replayed:
        go_on_sync(conn, done.claim, actor, now)
    return done


def go_on_sync(conn: backend.Conn, claim: claims.Claim, actor: str, now: datetime) -> int | None:
    """The settled claim's item, if the SLA dropped it (breach) while it waited in drafting
    behind this claim, back as a new attempt, as /replay would; its id, else None. An item
    still in drafting needs nothing here: its next draft begins the next try."""
    if claim.item_id is None:
        return None
    item = items.lock_sync(conn, claim.item_id)
    if item.state != State.BREACH:
        return None
    newest = conn.execute(Q["newest_of_item"], {"item_id": item.id}).fetchone()[0]
    if newest != claim.id or llm_outputs.get_sync(conn, claim.id) is not None:
        return None  # it had moved past this claim before it breached
    reason = f"budget claim {claim.id}, which it waited behind, was settled"
    items.apply_one(conn, items.Move(item, State.NEW, actor, now, reason, way="replay"))
    return item.id
