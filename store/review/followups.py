"""What operators ask beyond one tap: reply prompts, redraft notes, bulk offers, nudges.

    followups.ask_sync(conn, prompts.Message(chat, message), "reject", shown, now)
    asked = await followups.asked(store, chat, reply_to)       # None: not open (or answered)
    offer = await followups.offer(store, "news", [(12, 1, 3), ...], now)
    followups.nudge_sync(conn, item_id, attempt, "remind", now)   # False: sent before

A bulk offer lists exact (item, attempt, version) triples: a decision taken from it
applies to those versions only, as a card's buttons apply to the card's version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, NamedTuple

from store import backend, clock, errors, sql
from store.backends.core import Store
from store.review import prompts

Q = sql.load("followups")

AskKind = Literal["reject", "redraft"]
NudgeKind = Literal["remind", "escalate"]
#: How long an unanswered prompt stays open.
KEEP = timedelta(days=7)
#: How long a bulk offer can be acted on.
OFFER_LIFE = timedelta(days=2)
#: The longest redraft note kept (characters).
MAX_NOTE = 1_000


class Shown(NamedTuple):
    """What a card showed: an item's attempt and draft version, the one a decision applies to."""

    item_id: int
    attempt: int
    version: int


@dataclass(frozen=True)
class Asked:
    kind: AskKind
    item_id: int
    attempt: int
    version: int

    @property
    def shown(self) -> Shown:
        return Shown(self.item_id, self.attempt, self.version)


@dataclass(frozen=True)
class Offer:
    id: int
    pipeline: str | None
    #: (item id, attempt, version), as listed.
    items: tuple[tuple[int, int, int], ...]
    created_at: datetime
    decided_at: datetime | None


def ask_sync(
    conn: backend.Conn, message: prompts.Message, kind: AskKind, shown: Shown, now: datetime
) -> None:
    conn.execute(Q["forget_older_asks"], {"before": clock.to_ms(now - KEEP)})
    conn.execute(
        Q["ask"],
        {
            "chat_id": message.chat_id,
            "message_id": message.message_id,
            "kind": kind,
            "item_id": shown.item_id,
            "attempt": shown.attempt,
            "version": shown.version,
            "now": clock.to_ms(now),
        },
    )


async def ask(
    store: Store, message: prompts.Message, kind: AskKind, shown: Shown, now: datetime
) -> None:
    await store.write(ask_sync, message, kind, shown, now)


async def asked(store: Store, chat_id: int, message_id: int) -> Asked | None:
    def query(conn: backend.Conn) -> Asked | None:
        row = conn.execute(Q["asked"], {"chat_id": chat_id, "message_id": message_id}).fetchone()
        return Asked(row[2], row[3], row[4], row[5]) if row else None

    return await store.read(query)


def answered_sync(conn: backend.Conn, chat_id: int, message_id: int) -> None:
    conn.execute(Q["answered"], {"chat_id": chat_id, "message_id": message_id})


def keep_note_sync(
    conn: backend.Conn, item_id: int, attempt: int, note: str, actor: str, now: datetime
) -> None:
    params = {"item_id": item_id, "attempt": attempt, "note": note[:MAX_NOTE]}
    conn.execute(Q["keep_note"], {**params, "actor": actor, "now": clock.to_ms(now)})


async def note(store: Store, item_id: int, attempt: int) -> str | None:
    """The reviewer's note for this attempt's draft, if a redraft asked for one."""

    def query(conn: backend.Conn) -> str | None:
        row = conn.execute(Q["note"], {"item_id": item_id, "attempt": attempt}).fetchone()
        return str(row[0]) if row else None

    return await store.read(query)


async def offer(
    store: Store, pipeline: str | None, listed: list[tuple[int, int, int]], now: datetime
) -> Offer:
    def unit(conn: backend.Conn) -> Offer:
        conn.execute(Q["forget_old_offers"], {"before": clock.to_ms(now - OFFER_LIFE)})
        params = {"pipeline": pipeline, "items": json.dumps(listed), "now": clock.to_ms(now)}
        offer_id = int(conn.execute(Q["offer"], params).fetchone()[0])
        return Offer(offer_id, pipeline, tuple(listed), now, None)

    return await store.write(unit)


async def get_offer(store: Store, offer_id: int, now: datetime) -> Offer:
    """An offer that can still be acted on; NotFound or Conflict otherwise."""

    def query(conn: backend.Conn) -> Offer | None:
        row = conn.execute(Q["get_offer"], {"id": offer_id}).fetchone()
        if row is None:
            return None
        listed = tuple((int(i), int(a), int(v)) for i, a, v in json.loads(row[2]))
        return Offer(row[0], row[1], listed, clock.from_ms(row[3]), clock.maybe_from_ms(row[4]))

    found = await store.read(query)
    if found is None:
        raise errors.NotFound(f"no list {offer_id}")
    if found.decided_at is not None:
        raise errors.Conflict("this list was decided already; send /pending for a fresh one")
    if now - found.created_at > OFFER_LIFE:
        raise errors.Conflict("this list is too old to act on; send /pending for a fresh one")
    return found


def close_offer_sync(conn: backend.Conn, offer_id: int, now: datetime) -> None:
    """Mark the offer decided; Conflict if another decision took it first."""
    if conn.execute(Q["close_offer"], {"id": offer_id, "now": clock.to_ms(now)}).rowcount != 1:
        raise errors.Conflict("this list was decided already; send /pending for a fresh one")


def nudge_sync(
    conn: backend.Conn, item_id: int, attempt: int, kind: NudgeKind, now: datetime
) -> bool:
    """Record a reminder or an escalation; False if this attempt had one already."""
    params = {"item_id": item_id, "attempt": attempt, "kind": kind, "now": clock.to_ms(now)}
    return conn.execute(Q["nudge"], params).rowcount == 1


def nudged_sync(conn: backend.Conn, item_id: int, attempt: int, kind: NudgeKind) -> bool:
    params = {"item_id": item_id, "attempt": attempt, "kind": kind}
    return conn.execute(Q["nudged"], params).fetchone() is not None


async def nudges_of(store: Store, item_ids: list[int]) -> set[tuple[int, int, str]]:
    """(item id, attempt, kind) of the reminders and escalations sent for these items."""

    def query(conn: backend.Conn) -> set[tuple[int, int, str]]:
        rows = conn.execute(Q["nudges_of"], {"ids": json.dumps(item_ids)})
        return {(int(i), int(a), str(k)) for i, a, k in rows}

    return await store.read(query)
