"""Signs the event chain's head now and then and at shutdown, and posts the day's signed
head to the operators' chat: a witness outside this machine, so rewriting history would
mean rewriting the chat too.

    RuntimeConfig(..., duties=(witness.worker, ...))

A leader duty: among workers sharing a store, only the leader signs and posts, so no
two sign the same head. The key is the signing worker's data directory's
(pipelines.audit.keys); each checkpoint names its key by key_id. Each pass signs the
head if it moved since the last checkpoint; the first pass of each UTC day also queues
one message with the signed head (an outbox alert with a per-day key, so a restart
posts no second).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from pipelines.audit import keys as audit_keys
from pipelines.service import workers
from store import backend, outbox, units
from store.audit import checkpoints, sealer
from store.db import Store

log = logging.getLogger(__name__)

#: Seconds between two signatures of the chain head (when it moved).
SIGN_EVERY_S = 600.0


def head_text(cp: checkpoints.Checkpoint) -> str:
    """The day's message: a short line a phone shows whole, plain text (an alert's text
    is shown as written, so no markdown marks). The signature and the public key (screens
    of base64) are in `gatehouse audit export` and `gatehouse audit key`."""
    return (
        f"🔏 audit head #{cp.event_id} signed {units.day(cp.signed_at)}, key {cp.key_id[:8]}…, "
        f"hash {cp.hash[:12]}…; the full signature: gatehouse audit export"
    )


async def sign(
    store: Store, key: Any, now: datetime, *, post: bool, seal_first: bool = False
) -> checkpoints.Checkpoint | None:
    """Sign the sealed head (unless already signed) and, with `post`, queue the day's
    message. With `seal_first`, seal what waits in the same unit, so the checkpoint
    covers every event committed before it (the sealer's own last pass may come later)."""

    def unit(conn: backend.Conn) -> checkpoints.Checkpoint | None:
        if seal_first:
            sealer.seal_sync(conn)
        cp = checkpoints.sign_head_sync(conn, audit_keys.signer(key), now)
        if cp is not None and post:
            text, day = head_text(cp), f"audit-head:{now:%Y-%m-%d}"
            outbox.alert_sync(conn, text, now, key=day, level="info")
        return cp

    return await store.write(unit)


async def worker(runtime: Any, stop: asyncio.Event) -> None:
    """Sign every SIGN_EVERY_S, and once more when the leader stands down (after its
    other duties and the engine have ended, its lease still held; after a lost lease
    another leader signs); post the first head of each day."""
    key = audit_keys.load_or_create(runtime.store.config.data_dir)

    async def at_shutdown() -> None:
        # Nothing of this process writes any more: the head signed is the newest event.
        await sign(runtime.store, key, runtime.now(), post=False, seal_first=True)
        log.info("audit head signed at shutdown")

    runtime.leader.at_stand_down("audit-head", at_shutdown)
    while not stop.is_set():
        # Sealing first: a head signed right after start must not miss what waits unsealed
        # (it would sign nothing, or an older head, until the next turn).
        await sign(runtime.store, key, runtime.now(), post=True, seal_first=True)
        await workers.wait_any((stop,), SIGN_EVERY_S)
