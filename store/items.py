"""Items and their transitions: each change and its event commit together.

    item = await store.write(items.create_sync, "news", "feed", "guid-1", {"title": ...}, now)
    item = await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)

Each `*_sync` function is a unit, or a part of a caller's unit, so rows that belong with
a transition (a draft, a vote, an outbox row) commit in the same transaction:

    def unit(conn):
        moved = items.transition_sync(conn, item_id, State.AWAITING_APPROVAL, "system", now)
        outbox.enqueue_sync(conn, "card", "operators", {...}, now, item_id=item_id)
        return moved
    await store.write(unit)

A row the move itself causes goes with it (`queue=[outbox.Queued(...)]`): it is written
only if the item moves, on PostgreSQL by the move's own statement (store.audit.paired).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from store import backend, clock, errors, machine, outbox, sql
from store.audit import events, paired
from store.backends import text
from store.backends.core import Store
from store.machine import State

log = logging.getLogger(__name__)

Q = sql.load("items")


class Throttled(errors.Conflict):
    """An automatic transition came too soon after the same one; try again later."""


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
    actor: str = "system",
) -> Item | None:
    """Record a fetched item in state new with its event; None if it was already known.

    Text SQLite cannot hold (a lone surrogate from a JSON escape) is cleaned to U+FFFD,
    so one odd entry is still recorded rather than failing its whole batch. A NUL needs
    nothing: JSON writes it as an escape, which PostgreSQL's text holds.
    """
    made = create_many_sync(conn, pipeline, scope, {source_id: payload}, now, actor)
    return made[0] if made else None


def create_many_sync(
    conn: backend.Conn,
    pipeline: str,
    scope: str,
    fetched: dict[str, dict[str, Any]],
    now: datetime,
    actor: str = "system",
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
        "actor": events.check_actor(actor),
        "reason": "fetched",
    }
    created = _many(conn, Q["create_many"], params)
    order = {source_id: n for n, source_id in enumerate(fetched)}
    created.sort(key=lambda item: order[item.source_id])
    made = [(item.id, None, item.attempt) for item in created]
    paired.follow(conn, made, [], State.NEW, actor, now, "fetched", ())
    return created


def _storable(source_id: str, payload: dict[str, Any]) -> dict[str, str]:
    """An item's columns from what was fetched; text SQLite cannot hold is cleaned."""
    stored = json.dumps(payload, ensure_ascii=False)
    if text.unstorable(stored):
        payload = json.loads(text.clean(stored))
        stored = json.dumps(payload, ensure_ascii=False)
    return {"source_id": source_id, "payload": stored, "content_hash": content_hash(payload)}


def transition_sync(
    conn: backend.Conn,
    item_id: int,
    to: State,
    actor: str,
    now: datetime,
    *,
    reason: str | None = None,
    expect_version: int | None = None,
    expect_attempt: int | None = None,
    deadline: timedelta | None = None,
    locked: Item | None = None,
    queue: Sequence[outbox.Queued] = (),
) -> Item:
    """Move an item and write its one event; see the module docstring of store.machine.

    Re-asserting the current state with the same work (version, attempt) returns
    the row unchanged; with different work it is a Conflict. A terminal state
    accepts repeats silently. A move not in the table raises IllegalTransition.
    `locked` is the item as this unit already locked it (`lock_sync`): its row is not
    read again, and the move's compare-and-set still refuses it if it went stale.
    `queue`: outbox rows written with the move (not if it is a repeat or refused).
    """
    to = State(to)
    if locked is not None and locked.id != item_id:
        raise ValueError(f"locked is item {locked.id}, not item {item_id}")
    current = locked if locked is not None else lock_sync(conn, item_id)
    state, attempt, version = current.state, current.attempt, current.version
    same_work = expect_version in (None, version) and expect_attempt in (None, attempt)
    if state == to:
        if to in machine.TERMINAL or same_work:
            return current
        raise errors.Conflict(
            f"item {item_id} is already {to} with version {version} attempt {attempt}; "
            f"this request is for version {expect_version} attempt {expect_attempt}"
        )
    if not machine.allowed(state, to):
        valid = ", ".join(sorted(machine.TRANSITIONS[state])) or "none (an end state; use replay)"
        raise errors.IllegalTransition(
            f"item {item_id} cannot go from {state} to {to}; from {state}: {valid}"
        )
    if not same_work:
        raise errors.Conflict(
            f"item {item_id} is at version {version} attempt {attempt}; "
            f"this request is for version {expect_version} attempt {expect_attempt}"
        )
    at, due = clock.to_ms(now), _due(to, now, deadline)
    floor_from = _floor_from(actor, now)
    if not move_sync(conn, current, to, actor, now, reason, due, floor_from, queue):
        # The floor is checked inside the move; only a refused move asks which it was.
        _check_floor(conn, item_id, to, actor, now)
        # Unreachable with one writer; kept as the compare-and-set guard.
        raise errors.Conflict(f"item {item_id} changed underneath this transition")
    if to == State.FAILED:
        # Every path that fails an item comes through here, so each failure is logged
        # once, whatever else (an alert, an event) the caller records with it.
        log.warning("item %s (%s) failed: %s", item_id, current.pipeline, reason or "no reason")
    return dataclasses.replace(
        current,
        state=to,
        reason=reason,
        last_transition_at=clock.from_ms(at),
        deadline=clock.maybe_from_ms(due),
    )


def move_sync(
    conn: backend.Conn,
    item: Item,
    to: State,
    actor: str,
    now: datetime,
    reason: str | None,
    deadline_ms: int | None,
    floor_from: int | None,
    queue: Sequence[outbox.Queued] = (),
) -> bool:
    """The compare-and-set under every single move: `item` (as this unit locked it) goes
    to `to` with its event and the rows of `queue`, if its row is still as read and the
    floor (`floor_from`, ms; None: none) allows; False, writing nothing, if not. The state
    table is the caller's to check."""
    params = {
        "id": item.id,
        "from_state": str(item.state),
        "to_state": str(to),
        "attempt": item.attempt,
        "version": item.version,
        "reason": reason,
        "now": clock.to_ms(now),
        "deadline": deadline_ms,
        "floor_from": floor_from,
        "actor": events.check_actor(actor),
        "queue": paired.queue_json(queue, now),
    }
    cursor = conn.execute(Q["move"], params)
    if cursor.rowcount != 1:
        return False
    moved = [(item.id, item.state, item.attempt)]
    paired.follow(conn, moved, cursor.fetchall(), to, actor, now, reason, queue)
    return True


class Seen(NamedTuple):
    """An item as a caller knows it without its row (a dispatch row's job, say): what a
    compare-and-set move needs."""

    id: int
    state: State
    attempt: int
    version: int


def move_many_sync(
    conn: backend.Conn,
    seen: Sequence[Item | Seen],
    to: State,
    actor: str,
    now: datetime,
    *,
    reason: str | None = None,
    deadline: timedelta | None = None,
    new_version: bool = False,
    queue: Sequence[outbox.Queued] = (),
) -> list[Item]:
    """Move each item of `seen` to `to` in one statement (and write their events in one
    more), if it is still as it was read and the floor allows; returns those moved, in the
    order given. An item left behind is the caller's to try with `transition_sync`, which
    says why (or finds it moved already with the same work). `new_version`: the move
    takes each item to its next draft version, which the caller stores in the same unit;
    `queue`: outbox rows written with the moves, each only if its item moved.
    Never to failed, whose every move `transition_sync` logs."""
    to = State(to)
    if to == State.FAILED:
        raise ValueError("failing an item goes through transition_sync, which logs it")
    asked = [item for item in seen if machine.allowed(item.state, to)]
    if not asked:
        return []
    rows = [
        {"id": i.id, "state": str(i.state), "attempt": i.attempt, "version": i.version}
        for i in asked
    ]
    params = {
        "seen": json.dumps(rows),
        "to_state": to.value,
        "reason": reason,
        "now": clock.to_ms(now),
        "deadline": _due(to, now, deadline),
        "floor_from": _floor_from(actor, now),
        "bump": int(new_version),
        "actor": events.check_actor(actor),
        "queue": paired.queue_json(queue, now),
    }
    rows = conn.execute(Q["move_many"], params).fetchall()
    moved = {item.id: item for item in map(Item.from_row, rows)}
    was = [item for item in asked if item.id in moved]
    made = [(i.id, i.state, i.attempt) for i in was]
    paired.follow(conn, made, rows, to, actor, now, reason, queue)
    return [moved[item.id] for item in was]


def _due(to: State, now: datetime, deadline: timedelta | None) -> int | None:
    """When an item moved to `to` now is due (ms), or None when `to` has no deadline."""
    window = deadline if deadline is not None else machine.DEADLINES.get(to)
    return clock.to_ms(now + window) if to in machine.DEADLINES and window else None


def _floor_from(actor: str, now: datetime) -> int | None:
    """An automatic move is refused if the item entered its state automatically after
    this (ms); a person's move has no floor."""
    return clock.to_ms(now - machine.FLOOR) if actor in events.AUTOMATIC_ACTORS else None


def _check_floor(conn: backend.Conn, item_id: int, to: State, actor: str, now: datetime) -> None:
    if actor not in events.AUTOMATIC_ACTORS:
        return
    last = events.last_automatic_entry(conn, "item", item_id, to)
    if last is not None and now - last < machine.FLOOR:
        raise Throttled(
            f"item {item_id} entered {to} automatically at {last.isoformat()}; "
            f"automatic re-entry waits {machine.FLOOR.total_seconds():g} s"
        )


def replay_sync(
    conn: backend.Conn,
    item_id: int,
    actor: str,
    now: datetime,
    reason: str,
    *,
    force: bool = False,
) -> Item:
    """Bring a dropped item (or, with force, a dispatched one) back to new, attempt + 1."""
    item = lock_sync(conn, item_id)
    if item.state not in machine.DROPPED and not (force and item.state == State.DISPATCHED):
        hint = (
            f" (to send it again: gatehouse replay {item_id} --force)"
            if item.state == State.DISPATCHED
            else ""
        )
        raise errors.IllegalTransition(
            f"item {item_id} is {item.state}, not dropped; only "
            f"{', '.join(sorted(machine.DROPPED))} items can be replayed{hint}"
        )
    _check_floor(conn, item.id, State.NEW, actor, now)
    params = {
        "id": item_id,
        "from_state": item.state,
        "attempt": item.attempt,
        "reason": reason,
        "now": clock.to_ms(now),
    }
    replayed = _one(conn, Q["replay"], params)
    if replayed is None:
        raise errors.Conflict(f"item {item_id} changed underneath this replay")
    events.append(
        conn,
        "item",
        item_id,
        item.state,
        State.NEW,
        actor,
        now,
        attempt=replayed.attempt,
        reason=reason,
    )
    return replayed


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


async def get(store: Store, item_id: int) -> Item:
    return await store.read(get_sync, item_id)


async def in_state(
    store: Store, state: State, pipeline: str | None = None, limit: int = 100
) -> list[Item]:
    """Items in one state, the longest-waiting first."""
    return await store.read(in_state_sync, state, pipeline, limit)


async def approved_since(
    store: Store, pipeline: str, since: datetime, limit: int
) -> list[Approved]:
    """A pipeline's drafts approved or dispatched since `since`, the newest first."""
    params = {"pipeline": pipeline, "since": clock.to_ms(since), "exclude": -1, "limit": limit}

    def query(conn: backend.Conn) -> list[Approved]:
        cursor = conn.execute(Q["approved_since"], params)
        return [Approved.from_row(row) for row in cursor.fetchall()]

    return await store.read(query)


async def counts(
    store: Store, pipelines: Iterable[str], states: Iterable[State]
) -> dict[str, dict[State, int]]:
    """pipeline -> state -> number of items, for the pipelines and states asked about.

    Each figure is one range of an index: whole-table grouping read every item at 1M.
    """
    names, wanted = list(pipelines), [State(s) for s in states]

    def query(conn: backend.Conn) -> dict[str, dict[State, int]]:
        return {
            name: {
                state: conn.execute(
                    Q["count_in_state"], {"pipeline": name, "state": state}
                ).fetchone()[0]
                for state in wanted
            }
            for name in names
        }

    return await store.read(query)
