"""What an item's move writes with it: its paired event and the outbox rows it causes,
the one place that knows how each dialect writes them.

    rows = conn.execute(Q["move_many"], {..., "queue": paired.queue_json(moves)}).fetchall()
    paired.follow(conn, [paired.Entry(item.id, left, to, attempt, actor, at, why)], rows, effects)

On PostgreSQL the move's own statement writes both (store/sql/postgres/items.sql: its
moves are data-modifying CTEs, one round trip where there were one per event and row).
SQLite cannot write inside WITH, so there `follow` writes each with a statement of its
own after the move (`backend.chains_writes` tells which): the events of moves alike in
all but their item in one statement.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import NamedTuple

from store import backend, outbox
from store.audit import events
from store.items.machine import State


class Entry(NamedTuple):
    """One move just made, as its event tells it: the item, the state it left (None: it
    was created), where it went, its attempt after the move, who, when and why."""

    item_id: int
    left: State | None
    to: State
    attempt: int
    actor: str
    at: datetime
    reason: str | None


class Told(NamedTuple):
    """What an event says beside its item: moves alike in it share one statement."""

    to: State
    actor: str
    at: datetime
    reason: str | None


def queue_json(effects: Iterable[tuple[outbox.Queued, datetime]]) -> str:
    """The rows to queue with moves (each with its move's time), as the :queue parameter
    of a move's statement takes them."""
    return json.dumps([row.fields(at) for row, at in effects])


def follow(
    conn: backend.Conn,
    made: Sequence[Entry],
    rows: Sequence[backend.Row],
    effects: Sequence[outbox.Queued],
) -> None:
    """Complete moves just made (`rows`: what their statement returned): each one's event
    and its rows of `effects`, and the wake-up of the workers of the rows queued."""
    if backend.chains_writes(conn):  # the move wrote them, and names the kinds it queued
        for row in rows:
            for kind in row["queued"]:
                outbox.announce_sync(conn, kind)
        return
    if len(made) == 1:  # the common case, without the grouping
        [entry] = made
        _log(conn, [(entry.item_id, entry.left, entry.attempt)], _told(entry))
    else:
        for told, alike in itertools.groupby(made, _told):
            _log(conn, [(entry.item_id, entry.left, entry.attempt) for entry in alike], told)
    if not effects:
        return
    when = {entry.item_id: entry.at for entry in made}
    for queued in effects:
        if queued.item_id in when:
            outbox.put_sync(conn, queued, when[queued.item_id])


def _log(conn: backend.Conn, moved: list[tuple[int, State | None, int]], told: Told) -> None:
    """The events of moves alike in all but their item: one statement."""
    to, actor, at, reason = told
    if len(moved) == 1:
        [(item_id, left, attempt)] = moved
        events.append(conn, "item", item_id, left, to, actor, at, attempt=attempt, reason=reason)
    else:
        events.append_many(conn, "item", moved, to, actor, at, reason=reason)


def _told(entry: Entry) -> Told:
    return Told(entry.to, entry.actor, entry.at, entry.reason)
