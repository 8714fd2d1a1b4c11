"""The audit log: append-only, hash-chained events, one per state change.

Every event's hash covers its own fields and the previous event's hash, so the
log is one chain: an event edited or deleted behind the program's back (the
triggers forbid both, but a raw connection can drop them) breaks the chain at
exactly that row, and `verify_chain` names it. The previous hash is not stored a
second time: readers derive it from the event before (the event's own hash covers it).

`append(conn, ...)` runs inside the caller's write unit, so an event always
commits together with the state change it records.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, cast

from store import backend, clock, sql
from store.core import Store

Q = sql.load("events")

Entity = Literal["item", "claim", "budget", "pipeline", "token"]
GENESIS = "0" * 64
AUTOMATIC_ACTORS = ("system", "scheduler", "sweep")
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


@dataclass(frozen=True)
class Event:
    id: int
    entity: Entity
    entity_id: str
    from_state: str | None
    to_state: str
    actor: str
    attempt: int
    reason: str | None
    at: datetime
    prev_hash: str
    hash: str

    @classmethod
    def from_row(cls, row: backend.Row) -> Event:
        return cls(
            id=row["id"],
            entity=row["entity"],
            entity_id=row["entity_id"],
            from_state=row["from_state"],
            to_state=row["to_state"],
            actor=row["actor"],
            attempt=row["attempt"],
            reason=row["reason"],
            at=clock.from_ms(row["at"]),
            prev_hash=row["prev_hash"],
            hash=row["hash"],
        )


#: The hashed fields, in order (prev_hash last).
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
    """sha256 over the event's fields (id and prev_hash included), canonically encoded."""
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
    """Append one event inside the caller's transaction.

    On PostgreSQL the connection collects the unit's events (`pending_events`) and
    links them at commit under one lock (`link`): several writers share the chain,
    and holding its head from here to the commit would serialise every unit behind it.
    """
    fields: dict[str, object] = {
        "entity": entity,
        "entity_id": str(entity_id),
        # Plain str, not a State: sqlite3 binds a str subclass through its adapter
        # lookup, 1.1 µs a parameter (a transition in a 64-unit batch: 149 -> 142 µs).
        "from_state": None if from_state is None else str(from_state),
        "to_state": str(to_state),
        "actor": check_actor(actor),
        "attempt": attempt,
        "reason": reason,
        "at": clock.to_ms(now),
    }
    pending: list[dict[str, object]] | None = getattr(conn, "pending_events", None)
    if pending is not None:
        pending.append(fields)
    else:
        link(conn, [fields])


def link(conn: backend.Conn, batch: list[dict[str, object]]) -> None:
    """Chain events onto the head, in order: each gets the next id and its hash."""
    head = conn.execute(Q["head"]).fetchone()
    last_id, prev_hash = (head[0], head[1]) if head else (0, GENESIS)
    for event in batch:
        last_id += 1
        fields = {**event, "id": last_id, "prev_hash": prev_hash}
        fields["hash"] = prev_hash = compute_hash(fields)
        conn.execute(Q["insert"], fields)


def last_automatic_entry(
    conn: backend.Conn, entity: Entity, entity_id: str | int, to_state: str
) -> datetime | None:
    pending: list[dict[str, object]] = getattr(conn, "pending_events", [])
    for event in reversed(pending):  # this unit's own, not linked yet (PostgreSQL)
        if (event["entity"], event["entity_id"], event["to_state"]) == (
            entity,
            str(entity_id),
            to_state,
        ) and event["actor"] in AUTOMATIC_ACTORS:
            return clock.from_ms(cast(int, event["at"]))
    row = conn.execute(
        Q["last_entry"], {"entity": entity, "entity_id": str(entity_id), "to_state": str(to_state)}
    ).fetchone()
    return clock.from_ms(row[0]) if row else None


def _events(conn: backend.Conn, query: str, params: dict[str, object]) -> list[Event]:
    cursor = conn.execute(query, params)
    cursor.row_factory = sqlite3.Row
    return [Event.from_row(row) for row in cursor.fetchall()]


def for_entity_sync(conn: backend.Conn, entity: Entity, entity_id: str | int) -> list[Event]:
    params: dict[str, object] = {"entity": entity, "entity_id": str(entity_id), "genesis": GENESIS}
    return _events(conn, Q["for_entity"], params)


async def for_entity(store: Store, entity: Entity, entity_id: str | int) -> list[Event]:
    """An entity's events, oldest first."""
    return await store.read(for_entity_sync, entity, entity_id)


@dataclass(frozen=True)
class BrokenLink:
    """The first event whose stored hash or link does not match the recomputed chain."""

    event_id: int
    problem: str

    def __str__(self) -> str:
        return f"event {self.event_id}: {self.problem}"


@dataclass(frozen=True)
class ChainReport:
    checked: int
    broken: BrokenLink | None

    @property
    def ok(self) -> bool:
        return self.broken is None


def verify_sync(conn: backend.Conn, batch: int = 5000) -> ChainReport:
    """Recompute the whole chain in id order; stop at the first broken link."""
    expected_prev, expected_id, checked = GENESIS, 1, 0
    while True:
        params = {"from_id": expected_id, "batch": batch, "genesis": GENESIS}
        cursor = conn.execute(Q["all_from"], params)
        cursor.row_factory = sqlite3.Row
        rows = cursor.fetchall()
        for row in rows:
            fields = dict(row)
            problem = None
            if fields["id"] != expected_id:
                problem = f"event {expected_id} is missing (the next one is {fields['id']})"
            elif fields["prev_hash"] != expected_prev:
                problem = "its prev_hash does not match the previous event's hash"
            elif compute_hash(fields) != fields["hash"]:
                problem = "its contents do not match its hash (edited after it was written)"
            if problem:
                return ChainReport(checked, BrokenLink(fields["id"], problem))
            expected_prev, expected_id, checked = fields["hash"], expected_id + 1, checked + 1
        if len(rows) < batch:
            return ChainReport(checked, None)


async def verify_chain(store: Store) -> ChainReport:
    """Check every event's hash and link; report the first broken one."""
    return await store.read(verify_sync)
