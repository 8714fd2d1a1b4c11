"""The outbox: nothing reaches Telegram or a dispatch target without a row first.

A row is written in the same transaction as the transition that causes it; a
sender reads due rows, does the I/O, and records the result. A crash between the
two leaves the row pending, so the work is resumed after a restart, never lost.

    def unit(conn):
        items.apply(conn, [items.Move(...)])
        outbox.alert_sync(conn, payloads.Alert(text="..."), now, key="...")

Workers wait on `wakeup(store, kinds)`, an asyncio.Event set once a row of those kinds
has committed, so they need no polling loop to notice new work:

    woken = outbox.wakeup(store, ["dispatch"])
    await woken.wait(); woken.clear(); rows = await outbox.due(store, now, ["dispatch"])
"""

from __future__ import annotations

import asyncio
import functools
import json
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Self

from store import backend, clock, errors, payloads, sql
from store.backends import core, notify
from store.backends.core import Store
from store.items import machine

Q = sql.load("outbox")

Kind = Literal["card", "card_edit", "alert", "dispatch"]
KINDS: tuple[Kind, ...] = ("card", "card_edit", "alert", "dispatch")
#: The target of alerts; the bot resolves it to the alerts chat or each operator.
ALERTS = "alerts"
#: The target of approval cards; the bot resolves it to the pipeline's operators.
OPERATORS = "operators"
#: Item states after which an item's sent messages are no longer needed.
_ENDED = json.dumps(sorted(machine.TERMINAL))


@dataclass(frozen=True)
class Row(backend.Record):
    id: int
    kind: Kind
    target: str
    item_id: int | None
    payload: dict[str, Any]
    dedupe_key: str | None
    state: Literal["pending", "sent", "failed"]
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    external_id: str | None
    created_at: datetime
    sent_at: datetime | None

    @classmethod
    def from_row(cls, row: backend.Row, /, **given: Any) -> Self:
        payload = json.loads(row["payload"])
        if row["draft_text"] is not None:
            # A card row does not repeat its draft: the query joins the draft's text.
            payload["text"] = row["draft_text"]
        return super().from_row(row, payload=payload, **given)


def _rows(conn: backend.Conn, query: str, params: dict[str, Any]) -> list[Row]:
    return backend.fetch_all(conn, query, params, Row.from_row)


@dataclass(frozen=True)
class Queued:
    """An outbox row to queue about an item: by `enqueue_sync`, or with the item's move
    (`items.Move(..., effects=[...])`), which queues it only if the item moves."""

    item_id: int | None
    kind: Kind
    target: str
    payload: dict[str, Any]
    dedupe_key: str | None = None
    #: Held back until then (an approval's dispatch during its undo window); None: due at once.
    not_before: datetime | None = None

    def fields(self, now: datetime) -> dict[str, Any]:
        """The row's columns as the enqueue statements take them."""
        if self.kind not in KINDS:
            raise ValueError(f"unknown outbox kind {self.kind!r}; valid: {', '.join(KINDS)}")
        return {
            "kind": self.kind,
            "target": self.target,
            "item_id": self.item_id,
            "payload": json.dumps(self.payload, ensure_ascii=False),
            "dedupe_key": self.dedupe_key,
            "now": clock.to_ms(now),
            "due": clock.to_ms(self.not_before or now),
        }


def enqueue_sync(
    conn: backend.Conn,
    kind: Kind,
    target: str,
    payload: dict[str, Any],
    now: datetime,
    *,
    item_id: int | None = None,
    dedupe_key: str | None = None,
    not_before: datetime | None = None,
) -> int | None:
    """Queue a row inside the caller's unit; None if dedupe_key was already queued.

    `not_before` holds the row back until then (an approval's dispatch during its
    undo window); by default it is due at once."""
    queued = Queued(item_id, kind, target, payload, dedupe_key, not_before)
    return put_sync(conn, queued, now)


def put_sync(conn: backend.Conn, queued: Queued, now: datetime) -> int | None:
    """`enqueue_sync` for a row already described: its id, None if its key was queued."""
    row = conn.execute(Q["enqueue"], queued.fields(now)).fetchone()
    if row:
        announce_sync(conn, queued.kind)
    return int(row[0]) if row else None


def announce_sync(conn: backend.Conn, kind: Kind) -> None:
    """Wake the workers waiting for rows of `kind` once the unit that queued one commits:
    in this process, and (notify) in the others sharing the store."""
    core.on_commit(("outbox", kind), functools.partial(_wake, kind))
    notify.send_sync(conn, channel(kind))


def alert_sync(
    conn: backend.Conn, alert: payloads.Alert, now: datetime, *, key: str | None = None
) -> int | None:
    """Queue an alert for the operators inside the caller's unit, at most once per key:
    words (`text`), or facts the bot words (`about`, `bot/chat/alerts.py`); one about an
    item of a pipeline goes where its card goes."""
    return enqueue_sync(
        conn, "alert", ALERTS, alert.to_json(), now, item_id=alert.item_id, dedupe_key=key
    )


#: store -> kind -> the events of the workers waiting for rows of that kind.
_waiting: weakref.WeakKeyDictionary[Store, dict[str, list[asyncio.Event]]] = (
    weakref.WeakKeyDictionary()
)


def channel(kind: Kind) -> str:
    """The notification channel of queued rows of `kind`, for workers in other processes."""
    return f"outbox_{kind}"


def wakeup(store: Store, kinds: Iterable[Kind]) -> asyncio.Event:
    """An event set each time a row of one of `kinds` is committed to this store: by
    this process, or (any kind) by another worker sharing it."""
    event = asyncio.Event()
    by_kind = _waiting.setdefault(store, {})
    for kind in kinds:
        by_kind.setdefault(kind, []).append(event)
        store.listen(channel(kind), event)
    return event


#: The longest a worker on a shared store waits without looking for rows other workers
#: queued (seconds): their notification wakes it sooner (store.backends.notify); this is the
#: fallback should one be lost.
SHARED_POLL_S = 5.0


def longest_wait(store: Store, seconds: float) -> float:
    """`seconds`, or less on a store other processes write to as well."""
    return seconds if store.dialect == "sqlite" else min(seconds, SHARED_POLL_S)


def _wake(kind: Kind, store: Store) -> None:
    for event in _waiting.get(store, {}).get(kind, ()):
        event.set()


enqueue = core.writes(enqueue_sync)


async def due(
    store: Store, now: datetime, kinds: Iterable[Kind] = KINDS, limit: int = 50
) -> list[Row]:
    """Pending rows whose time has come, oldest first."""

    def query(conn: backend.Conn) -> list[Row]:
        found = []
        for kind in dict.fromkeys(kinds):
            params = {"now": clock.to_ms(now), "kind": kind, "limit": limit}
            found += _rows(conn, Q["due"], params)
        return sorted(found, key=lambda row: row.id)[:limit]

    return await store.read(query)


@dataclass(frozen=True)
class Claimant:
    """A worker taking due rows, and how long it holds them: no other worker takes them
    until now + lease."""

    worker: str
    lease: timedelta


def claim_due_sync(
    conn: backend.Conn, claimant: Claimant, now: datetime, kinds: Iterable[Kind], limit: int
) -> list[Row]:
    """Take due rows no live claim holds, for the claimant until now + lease, oldest first."""
    params: dict[str, Any] = {
        "worker": claimant.worker,
        "now": clock.to_ms(now),
        "until": clock.to_ms(now + claimant.lease),
    }
    taken: list[Row] = []
    for kind in dict.fromkeys(kinds):
        if len(taken) < limit:
            params.update(kind=kind, limit=limit - len(taken))
            taken += _rows(conn, Q["claim_due"], params)
    return sorted(taken, key=lambda row: row.id)


async def claim_due(
    store: Store, claimant: Claimant, now: datetime, kinds: Iterable[Kind], limit: int = 50
) -> list[Row]:
    """Take due rows for the claimant: no other worker takes them until the lease lapses.

    Recording a row's outcome (mark_sent, mark_retry, defer, mark_failed) ends the
    claim; a worker that dies holding rows leaves them to whoever claims after it.
    """
    return await store.write(claim_due_sync, claimant, now, kinds, limit)


def release_claims_sync(conn: backend.Conn) -> int:
    """Free every claim (at the start of a store only one process opens: its holders died)."""
    return int(conn.execute(Q["release_claims"]).rowcount)


def get_sync(conn: backend.Conn, row_id: int) -> Row:
    found = _rows(conn, Q["get"], {"id": row_id})
    if not found:
        raise errors.NotFound(f"no outbox row {row_id}")
    return found[0]


async def queued(store: Store, dedupe_key: str) -> bool:
    """Whether a row was ever queued under `dedupe_key` (and not called off)."""
    return await store.read(
        lambda conn: conn.execute(Q["by_key"], {"dedupe_key": dedupe_key}).fetchone() is not None
    )


def cancel_sync(conn: backend.Conn, dedupe_key: str, error: str) -> bool:
    """Call off the pending row queued under `dedupe_key`; False if none is pending."""
    return _update(conn, "cancel", {"dedupe_key": dedupe_key, "error": error})


def _update(conn: backend.Conn, name: str, params: dict[str, Any]) -> bool:
    return conn.execute(Q[name], params).rowcount == 1


def mark_sent_sync(conn: backend.Conn, row_id: int, external_id: str | None, now: datetime) -> bool:
    """Record success inside the caller's unit; False if the row was not pending."""
    params = {"id": row_id, "external_id": external_id, "now": clock.to_ms(now)}
    return _update(conn, "mark_sent", params)


async def mark_sent(store: Store, row_id: int, external_id: str | None, now: datetime) -> bool:
    """Record success; False if the row was not pending (already recorded)."""
    return await store.write(mark_sent_sync, row_id, external_id, now)


async def mark_retry(
    store: Store, row_id: int, error: str, next_at: datetime, progress: str | None = None
) -> bool:
    """Count a failed attempt; `progress` (if given) replaces external_id: what got through."""
    params = {
        "id": row_id,
        "error": error,
        "next_at": clock.to_ms(next_at),
        "external_id": progress,
    }
    return await store.write(_update, "mark_retry", params)


def defer_sync(
    conn: backend.Conn, row_id: int, reason: str, next_at: datetime, progress: str | None = None
) -> bool:
    """Try again at `next_at` without counting an attempt (flood control, a busy item)."""
    params = {
        "id": row_id,
        "error": reason,
        "next_at": clock.to_ms(next_at),
        "external_id": progress,
    }
    return _update(conn, "defer", params)


async def defer(
    store: Store, row_id: int, reason: str, next_at: datetime, progress: str | None = None
) -> bool:
    return await store.write(defer_sync, row_id, reason, next_at, progress)


async def waiting(
    store: Store, now: datetime, kinds: Iterable[Kind], prefix: str, limit: int = 50
) -> list[Row]:
    """Pending rows not due yet whose last error starts with `prefix` (a flood wait)."""
    params = {
        "now": clock.to_ms(now),
        "kinds": json.dumps(list(kinds)),
        "prefix": prefix,
        "limit": limit,
    }
    return await store.read(_rows, Q["waiting"], params)


async def next_due(store: Store, kinds: Iterable[Kind]) -> datetime | None:
    """When the earliest pending row of `kinds` is due, or None if none is pending."""
    params = {"kinds": json.dumps(list(kinds))}
    found = await store.read(lambda conn: conn.execute(Q["next_due"], params).fetchone()[0])
    return clock.maybe_from_ms(found)


def mark_failed_sync(conn: backend.Conn, row_id: int, error: str) -> bool:
    """Close a row as failed, with the reason; False if it was not pending."""
    return _update(conn, "mark_failed", {"id": row_id, "error": error})


async def mark_failed(store: Store, row_id: int, error: str) -> bool:
    return await store.write(mark_failed_sync, row_id, error)


def for_item_sync(conn: backend.Conn, item_id: int, kind: Kind) -> list[Row]:
    return _rows(conn, Q["for_item"], {"item_id": item_id, "kind": kind})


async def for_item(store: Store, item_id: int, kind: Kind) -> list[Row]:
    """An item's rows of one kind, newest first."""
    return await store.read(for_item_sync, item_id, kind)


async def dispatches(store: Store) -> list[Row]:
    """Every dispatch row sent or still pending, oldest first."""
    return await store.read(_rows, Q["dispatches"], {})


def prune_sent_sync(conn: backend.Conn, before: datetime, batch: int) -> int:
    """Delete up to `batch` messages sent before `before` whose item has ended."""
    params = {"cutoff": clock.to_ms(before), "batch": batch, "ended": _ENDED}
    return conn.execute(Q["prune_sent"], params).rowcount
