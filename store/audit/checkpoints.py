"""Signed heads of the event chain: "event N had hash H", signed by the bot's key.

    cp = await store.write(checkpoints.sign_head_sync, signer, now)   # None: no events yet
    newest = await store.read(checkpoints.latest_sync)

The store keeps checkpoints and never sees the key: `signer` turns the message
(`message(event_id, hash, signed_at)`) into (key id, signature). A checkpoint is taken
in the same unit that reads the head, so it names an event that really was the newest.
An export that stops before a checkpoint's event was cut short; the checkpoint's
signature shows it was not made up afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store import backend, clock, sql
from store.audit import events
from store.backends.core import Store

Q = sql.load("checkpoints")
#: What a signature covers (bump the prefix if the layout ever changes).
PREFIX = "gatehouse-audit-checkpoint:v1"

Signer = Callable[[bytes], tuple[str, str]]


def message(event_id: int, hash_: str, signed_at_ms: int) -> bytes:
    """The exact bytes a checkpoint's signature covers."""
    return f"{PREFIX}:{event_id}:{hash_}:{signed_at_ms}".encode()


@dataclass(frozen=True)
class Checkpoint(backend.Record):
    id: int
    event_id: int
    hash: str
    signed_at: datetime
    key_id: str
    signature: str


def latest_sync(conn: backend.Conn) -> Checkpoint | None:
    return backend.fetch_one(conn, Q["latest"], {}, Checkpoint.from_row)


def sign_head_sync(conn: backend.Conn, signer: Signer, now: datetime) -> Checkpoint | None:
    """Sign the newest event unless the newest checkpoint already names it; None: no events."""
    head = conn.execute(Q["head"]).fetchone()
    if head is None:
        return None
    last = latest_sync(conn)
    if last is not None and last.event_id == head[0]:
        return last
    signed_at = clock.to_ms(now)
    key_id, signature = signer(message(head[0], head[1], signed_at))
    params = {
        "event_id": head[0],
        "hash": head[1],
        "signed_at": signed_at,
        "key_id": key_id,
        "signature": signature,
    }
    row_id = conn.execute(Q["insert"], params).fetchone()[0]
    return Checkpoint(row_id, head[0], head[1], clock.from_ms(signed_at), key_id, signature)


async def since(store: Store, event_id: int) -> list[Checkpoint]:
    """Checkpoints naming event `event_id` or a later one, oldest first."""
    params = {"event_id": event_id}
    return await store.read(backend.fetch_all, Q["since"], params, Checkpoint.from_row)


async def events_from(store: Store, from_id: int, batch: int) -> list[dict[str, Any]]:
    """Up to `batch` events from `from_id` on, as exported: every stored field and the
    hash each chains to."""
    params = {"from_id": from_id, "batch": batch, "genesis": events.GENESIS}

    return await store.read(backend.fetch_all, Q["events_from"], params, dict)
