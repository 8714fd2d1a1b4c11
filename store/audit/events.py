"""The audit log: append-only, hash-chained events, one per state change.

`append(conn, ...)` runs inside the caller's write unit, so an event always commits
together with the state change it records. It writes the event unsealed: no place in
the chain, no hash. The leader's sealer (store.audit.sealer) then seals the unsealed events
in batches, in the order they were written: each gets the next place (`seq`) and a hash
over its fields, its place and the previous event's hash. Writers thus never wait on
one another for the chain's head, which several workers would otherwise all queue on.

Sealed events form one chain: one edited or deleted behind the program's back (the
triggers forbid both, but a raw connection can drop them) breaks the chain at exactly
that place, and `verify_chain` names it; events still unsealed are reported as pending.
The previous hash is not stored a second time: readers derive it from the event before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Literal, cast

from store import backend, clock, sql
from store.backends.core import Store

Q = sql.load("events")

Entity = Literal["item", "claim", "budget", "pipeline", "token", "slot"]
GENESIS = "0" * 64
AUTOMATIC_ACTORS = ("system", "scheduler", "sweep")
#: Checks a checkpoint's signature: (event id, hash, signed at in ms, key id, signature)
#: -> what is wrong with it, or None. The store never holds a key: the caller brings it.
SignatureCheck = Callable[[int, str, int, str, str], str | None]
_ACTOR = re.compile(r"^(system|scheduler|sweep|cli|operator:\d+|cli:[A-Za-z0-9._-]{1,64})$")


def operator(user_id: int) -> str:
    """The actor string for a Telegram operator."""
    return f"operator:{user_id}"


def cli(user: str) -> str:
    """The actor string for a person at the terminal, by Unix user name."""
    return check_actor(f"cli:{user}")


def check_actor(actor: str) -> str:
    if not _ACTOR.match(actor):
        raise ValueError(
            f"unknown actor {actor!r}; valid: system, scheduler, sweep, cli, "
            "operator:<telegram id>, cli:<unix user>"
        )
    return actor


@dataclasses.dataclass(frozen=True)
class Event(backend.Record):
    id: int
    entity: Entity
    entity_id: str
    from_state: str | None
    to_state: str
    actor: str
    attempt: int
    reason: str | None
    at: datetime
    #: The event's place in the chain; None (and no hashes) until it is sealed.
    seq: int | None
    prev_hash: str | None
    hash: str | None


#: The hashed fields, in order (prev_hash last). "id" is the event's place in the chain
#: (its `seq`, which is its row id for events sealed before the sealer existed).
_HASHED = (
    "id",
    "entity",
    "entity_id",
    "from_state",
    "to_state",
    "actor",
    "attempt",
    "reason",
    "at",
    "prev_hash",
)
#: json.dumps(..., separators=(",", ":")) builds an encoder per call; one is enough.
_CANONICAL = json.JSONEncoder(separators=(",", ":"))


def compute_hash(fields: dict[str, object]) -> str:
    """sha256 over the event's fields (its place and prev_hash included), canonically
    encoded."""
    body = _CANONICAL.encode([fields[n] for n in _HASHED])
    return hashlib.sha256(body.encode()).hexdigest()


def append(
    conn: backend.Conn,
    entity: Entity,
    entity_id: str | int,
    from_state: str | None,
    to_state: str,
    actor: str,
    now: datetime,
    *,
    attempt: int = 0,
    reason: str | None = None,
) -> None:
    """Append one unsealed event inside the caller's transaction."""
    fields: dict[str, object] = {
        "entity": entity,
        "entity_id": str(entity_id),
        # Plain str, not a State: sqlite3 binds a str subclass through its slower
        # adapter lookup, and every transition binds these.
        "from_state": None if from_state is None else str(from_state),
        "to_state": str(to_state),
        "actor": check_actor(actor),
        "attempt": attempt,
        "reason": reason,
        "at": clock.to_ms(now),
    }
    conn.execute(Q["insert"], fields)


def append_many(
    conn: backend.Conn,
    entity: Entity,
    moved: Sequence[tuple[str | int, str | None, int]],
    to_state: str,
    actor: str,
    now: datetime,
    *,
    reason: str | None = None,
) -> None:
    """Append one unsealed event per (entity id, from state, attempt) of `moved`, alike
    in the rest, in one statement: a chunk's events cost one round trip, not one each."""
    if not moved:
        return
    rows = [
        {"entity_id": str(entity_id), "from_state": None if old is None else str(old), "attempt": n}
        for entity_id, old, n in moved
    ]
    params = {
        "entity": entity,
        "moved": json.dumps(rows),
        "to_state": str(to_state),
        "actor": check_actor(actor),
        "reason": reason,
        "at": clock.to_ms(now),
    }
    conn.execute(Q["insert_many"], params)


def last_automatic_entry(
    conn: backend.Conn, entity: Entity, entity_id: str | int, to_state: str
) -> datetime | None:
    row = conn.execute(
        Q["last_entry"], {"entity": entity, "entity_id": str(entity_id), "to_state": str(to_state)}
    ).fetchone()
    return clock.from_ms(row[0]) if row else None


def for_entity_sync(conn: backend.Conn, entity: Entity, entity_id: str | int) -> list[Event]:
    params: dict[str, object] = {"entity": entity, "entity_id": str(entity_id), "genesis": GENESIS}
    return backend.fetch_all(conn, Q["for_entity"], params, Event.from_row)


async def for_entity(store: Store, entity: Entity, entity_id: str | int) -> list[Event]:
    """An entity's events, oldest first."""
    return await store.read(for_entity_sync, entity, entity_id)


@dataclasses.dataclass(frozen=True)
class BrokenLink:
    """The first event whose stored hash or link does not match the recomputed chain."""

    event_id: int
    problem: str

    def __str__(self) -> str:
        return f"event {self.event_id}: {self.problem}"


@dataclasses.dataclass(frozen=True)
class ChainReport:
    #: Sealed events whose hash and link were recomputed and matched.
    checked: int
    broken: BrokenLink | None
    #: Events written but not sealed yet: nothing to check until the sealer reaches them.
    pending: int = 0
    #: When the oldest pending event was written.
    oldest_pending: datetime | None = None

    @property
    def ok(self) -> bool:
        return self.broken is None


def _problem(
    fields: dict[str, object],
    expected_id: int,
    expected_prev: str,
    checkpoint: tuple[int, str] | None,
) -> str | None:
    if fields["id"] != expected_id:
        return f"event {expected_id} is missing (the next one is {fields['id']})"
    if fields["prev_hash"] != expected_prev:
        return "its prev_hash does not match the previous event's hash"
    if compute_hash(fields) != fields["hash"]:
        return "its contents do not match its hash (edited after it was written)"
    if checkpoint and checkpoint[0] == expected_id and checkpoint[1] != fields["hash"]:
        return "its hash is not the one its signed checkpoint names"
    return None


def _walk(conn: backend.Conn, batch: int, checkpoint: tuple[int, str] | None) -> ChainReport:
    """Recompute the sealed chain in order; stop at the first broken link."""
    expected_prev, expected_id, checked = GENESIS, 1, 0
    while True:
        params = {"from_id": expected_id, "batch": batch, "genesis": GENESIS}
        cursor = conn.execute(Q["all_from"], params)
        rows = cursor.fetchall()
        for row in rows:
            fields = dict(row)
            problem = _problem(fields, expected_id, expected_prev, checkpoint)
            if problem:
                return ChainReport(checked, BrokenLink(cast(int, fields["id"]), problem))
            expected_prev, expected_id, checked = fields["hash"], expected_id + 1, checked + 1
        if len(rows) < batch:
            break
    if checkpoint and checkpoint[0] >= expected_id:
        cut = f"missing: the sealed chain ends at {checked}, a signed checkpoint names it"
        return ChainReport(checked, BrokenLink(checkpoint[0], cut + " (its tail was cut)"))
    return ChainReport(checked, None)


def verify_sync(
    conn: backend.Conn, batch: int = 5000, signature: SignatureCheck | None = None
) -> ChainReport:
    """Check the sealed chain (against the newest signed checkpoint too, so a cut tail
    shows, and with `signature`, that checkpoint's signature, so a rewritten one shows)
    and count the events still waiting for the sealer."""
    half = conn.execute(Q["half_sealed"]).fetchone()
    if half is not None:
        problem = "it has a place in the chain or a hash but not both (tampered before sealing)"
        return ChainReport(0, BrokenLink(half[0], problem))
    newest = conn.execute(Q["newest_checkpoint"]).fetchone()
    report = _walk(conn, batch, (newest[0], newest[1]) if newest else None)
    if report.ok and newest is not None and signature is not None:
        # A forger who rewrote every hash after an edit, and the checkpoint's hash, passes
        # the walk; only the signature, which needs the key, shows it.
        event_id, hash_, signed_at, key_id, signed = newest
        forged = signature(event_id, hash_, signed_at, key_id, signed)
        if forged:
            report = ChainReport(report.checked, BrokenLink(newest[0], forged))
    oldest_ms, pending = conn.execute(Q["oldest_unsealed"]).fetchone()
    oldest = clock.from_ms(oldest_ms) if oldest_ms is not None else None
    return dataclasses.replace(report, pending=pending, oldest_pending=oldest)


async def verify_chain(store: Store, signature: SignatureCheck | None = None) -> ChainReport:
    """Check every sealed event's hash and link (and, with `signature`, the newest
    checkpoint's signature); report the first broken one, and how many events wait to be
    sealed."""
    return await store.read(verify_sync, 5000, signature)
