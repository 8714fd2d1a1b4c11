"""Items as rows: what is read of them, and their creation (each with its event).

    item = await store.write(items.create_sync, "news", "feed", "guid-1", {"title": ...}, now)
    found = await items.in_state(store, State.NEW, "news")

Moving an item is store.items.moves (`items.apply`); this module only reads and creates.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store import backend, clock, errors, sql
from store.backends import text
from store.items import machine, paired
from store.items.machine import State

Q = sql.load("items")
#: Who records a fetched item (its first event): the intake, never a person.
CREATOR = "system"


@dataclass
class Item:
    """An item as read: a snapshot that nothing writes back through.

    Not frozen, unlike the store's other records: every transition and every listed row
    builds one, and a frozen dataclass's __init__ sets each of its fields through
    object.__setattr__, several times the cost of a plain assignment."""

    id: int
    pipeline: str
    scope: str
    source_id: str
    payload_json: str
    content_hash: str
    state: State
    attempt: int
    version: int
    reason: str | None
    created_at: datetime
    last_transition_at: datetime
    deadline: datetime | None

    @classmethod
    def from_row(cls, row: backend.Row) -> Item:
        state, reason = row["state"], row["reason"]
        return cls.moved(row, state, reason, row["last_transition_at"], row["deadline"])

    @classmethod
    def moved(
        cls, row: backend.Row, state: str, reason: str | None, at_ms: int, deadline_ms: int | None
    ) -> Item:
        """The item a row holds, with the columns a transition writes taken from the
        arguments: a transition builds its result from the row it locked, once."""
        return cls(
            row["id"],
            row["pipeline"],
            row["scope"],
            row["source_id"],
            row["payload"],
            row["content_hash"],
            State(state),
            row["attempt"],
            row["version"],
            reason,
            clock.from_ms(row["created_at"]),
            clock.from_ms(at_ms),
            clock.maybe_from_ms(deadline_ms),
        )

    @functools.cached_property
    def payload(self) -> dict[str, Any]:
        """What was fetched (parsed on first use: most transitions never read it)."""
        parsed: dict[str, Any] = json.loads(self.payload_json)
        return parsed


@dataclass(frozen=True)
class Approved:
    """An approved (or dispatched) item's source id and the text of its draft."""

    item_id: int
    source_id: str
    text: str

    @classmethod
    def from_row(cls, row: backend.Row) -> Approved:
        return cls(item_id=row["id"], source_id=row["source_id"], text=row["text"])


def content_hash(payload: dict[str, Any]) -> str:
    """A stable hash of what was fetched: the ledger re-checks it before settling."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _one(conn: backend.Conn, query: str, params: dict[str, Any]) -> Item | None:
    cursor = conn.execute(query, params)
    row = cursor.fetchone()
    return Item.from_row(row) if row else None


def _many(conn: backend.Conn, query: str, params: dict[str, Any]) -> list[Item]:
    cursor = conn.execute(query, params)
    return [Item.from_row(row) for row in cursor.fetchall()]


def get_sync(conn: backend.Conn, item_id: int) -> Item:
    item = _one(conn, Q["get"], {"id": item_id})
    if item is None:
        raise errors.NotFound(f"no item {item_id}")
    return item


def lock_sync(conn: backend.Conn, item_id: int) -> Item:
    """The item, its row locked until the unit ends: read it so before deciding what to
    write. With several writers (PostgreSQL) a second decision on the item waits here
    and then sees the first one's votes and state; SQLite's one writer holds every row."""
    return Item.from_row(_locked_row(conn, item_id))


def lock_with_tells_sync(conn: backend.Conn, item_id: int) -> tuple[Item, dict[str, Any] | None]:
    """`lock_sync`, with the tells kept with the version the item is at (None: none), read
    in the same statement."""
    row = _locked_row(conn, item_id)
    tells = row["shown_tells"]
    return Item.from_row(row), None if tells is None else json.loads(tells)


def _locked_row(conn: backend.Conn, item_id: int) -> backend.Row:
    cursor = conn.execute(Q["lock"], {"id": item_id})
    row = cursor.fetchone()
    if row is None:
        raise errors.NotFound(f"no item {item_id}")
    return row


def create_sync(
    conn: backend.Conn,
    pipeline: str,
    scope: str,
    source_id: str,
    payload: dict[str, Any],
    now: datetime,
) -> Item | None:
    """Record a fetched item in state new with its event; None if it was already known.

    Text SQLite cannot hold (a lone surrogate from a JSON escape) is cleaned to U+FFFD,
    so one odd entry is still recorded rather than failing its whole batch. A NUL needs
    nothing: JSON writes it as an escape, which PostgreSQL's text holds.
    """
    made = create_many_sync(conn, pipeline, scope, {source_id: payload}, now)
    return made[0] if made else None


def create_many_sync(
    conn: backend.Conn,
    pipeline: str,
    scope: str,
    fetched: dict[str, dict[str, Any]],
    now: datetime,
) -> list[Item]:
    """`create_sync` for a chunk (source id -> payload) in two statements, however many
    items: the new ones in the order given; those already known are left alone."""
    if not fetched:
        return []
    rows = [_storable(source_id, payload) for source_id, payload in fetched.items()]
    params = {
        "pipeline": pipeline,
        "scope": scope,
        "now": clock.to_ms(now),
        "fetched": json.dumps(rows),
        "actor": CREATOR,
        "reason": "fetched",
    }
    created = _many(conn, Q["create_many"], params)
    order = {source_id: n for n, source_id in enumerate(fetched)}
    created.sort(key=lambda item: order[item.source_id])
    made = [
        paired.Entry(i.id, None, State.NEW, i.attempt, CREATOR, now, "fetched") for i in created
    ]
    paired.follow(conn, made, [], ())
    return created


def _storable(source_id: str, payload: dict[str, Any]) -> dict[str, str]:
    """An item's columns from what was fetched; text SQLite cannot hold is cleaned."""
    stored = json.dumps(payload, ensure_ascii=False)
    if text.unstorable(stored):
        payload = json.loads(text.clean(stored))
        stored = json.dumps(payload, ensure_ascii=False)
    return {"source_id": source_id, "payload": stored, "content_hash": content_hash(payload)}


def in_state_sync(
    conn: backend.Conn, state: State, pipeline: str | None = None, limit: int = 100
) -> list[Item]:
    return _many(conn, Q["in_state"], {"state": state, "pipeline": pipeline, "limit": limit})


def sla_due_sync(conn: backend.Conn, now: datetime) -> list[Item]:
    """Items past their deadline, or past the warning share of it."""
    return _many(conn, Q["sla_due"], {"now": clock.to_ms(now), **warn_params()})


def warn_params() -> dict[str, float | int]:
    """When a deadline's warning is due, as query parameters: its share and lead (ms)."""
    lead_ms = int(machine.WARN_LEAD.total_seconds() * 1000)
    return {"warn_share": machine.WARN_AT, "warn_lead": lead_ms}
