"""Signs the event chain's head now and then and at shutdown, and posts the day's signed
head to the operators' chat: a witness outside this machine, so rewriting history would
mean rewriting the chat too.

    RuntimeConfig(..., duties=(witness.make_worker(deployment_key), ...))
    RuntimeConfig(..., duties=(witness.worker, ...))     # one worker: no deployment key

A leader duty: among workers sharing a store, only the leader signs and posts, so no
two sign the same head. The key is the signing worker's data directory's
(pipelines.audit.keys); each checkpoint names its key by key_id. A leader first stores
its public key endorsed by the deployment key (pipelines.audit.trust), so a verify on
any other worker trusts what it signs; a key joining others is announced in the
operators' chat once, so a key nobody expected is seen. Each pass signs the head if it
moved since the last checkpoint; the first pass of each UTC day also queues one message
with the signed head (an outbox alert with a per-day key, so a restart posts no second).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric import ed25519

from pipelines.audit import keys as audit_keys
from pipelines.audit import trust
from pipelines.ground import waiting
from store import backend, outbox, payloads, units
from store.audit import checkpoints, sealer, signers
from store.db import Store

log = logging.getLogger(__name__)

#: The deployment key (pipelines.audit.trust), which endorses each leader's key.
Deployment = ed25519.Ed25519PrivateKey


class StandsDown(Protocol):
    def at_stand_down(self, name: str, final: Callable[[], Awaitable[object]]) -> None: ...


class Led(Protocol):
    """What the witness uses of the runtime: the store, the clock, and the leader, to
    sign once more when it stands down."""

    @property
    def store(self) -> Store: ...

    @property
    def leader(self) -> StandsDown: ...

    def now(self) -> datetime: ...


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
            outbox.alert_sync(conn, payloads.Alert(text=text, level="info"), now, key=day)
        return cp

    return await store.write(unit)


def key_text(signer: signers.Signer) -> str:
    """The chat's word on a key joining those the store held: who signs with it, and
    whose key vouches for it; one line, plain text."""
    return (
        f"🔑 a new audit signing key, {signer.key_id[:8]}… from {signer.worker} (another "
        "worker, or a data directory whose key was made anew), endorsed by the deployment "
        f"key {signer.endorsed_by[:8]}…: gatehouse audit verify trusts it on every worker"
    )


async def register(
    store: Store, deployment: Deployment, key: ed25519.Ed25519PrivateKey, now: datetime
) -> signers.Signer:
    """Store this worker's public key endorsed by the deployment key. A key joining other
    keys is announced in the chat, once (a per-key alert key), so an operator sees every
    key that may sign; the deployment's first key is in the day's head post already."""
    signer = trust.endorse(deployment, key, f"{socket.gethostname()}:{os.getpid()}", now)

    def unit(conn: backend.Conn) -> None:
        others = [row for row in signers.all_sync(conn) if row.key_id != signer.key_id]
        if signers.register_sync(conn, signer) and others:
            alert = f"audit-key:{signer.key_id}"
            outbox.alert_sync(
                conn, payloads.Alert(text=key_text(signer), level="info"), now, key=alert
            )

    await store.write(unit)
    return signer


def make_worker(
    deployment: Deployment | None,
) -> Callable[[Led, asyncio.Event], Awaitable[None]]:
    """The witness duty; with a deployment key, each leader registers its own key first
    (without one, only the data directory that signed can verify in place)."""

    async def duty(runtime: Led, stop: asyncio.Event) -> None:
        await _witness(runtime, stop, deployment)

    return duty


async def worker(runtime: Led, stop: asyncio.Event) -> None:
    """The witness without a deployment key (one worker, or a test of signing alone)."""
    await _witness(runtime, stop, None)


async def _witness(runtime: Led, stop: asyncio.Event, deployment: Deployment | None) -> None:
    """Sign every SIGN_EVERY_S, and once more when the leader stands down (after its
    other duties and the engine have ended, its lease still held; after a lost lease
    another leader signs); post the first head of each day."""
    key = audit_keys.load_or_create(runtime.store.config.data_dir)
    if deployment is not None:
        # Before the first signature: a checkpoint must never name a key not yet stored.
        await register(runtime.store, deployment, key, runtime.now())

    async def at_shutdown() -> None:
        # Nothing of this process writes any more: the head signed is the newest event.
        await sign(runtime.store, key, runtime.now(), post=False, seal_first=True)
        log.info("audit head signed at shutdown")

    runtime.leader.at_stand_down("audit-head", at_shutdown)
    while not stop.is_set():
        # Sealing first: a head signed right after start must not miss what waits unsealed
        # (it would sign nothing, or an older head, until the next turn).
        await sign(runtime.store, key, runtime.now(), post=True, seal_first=True)
        await waiting.wait_any((stop,), SIGN_EVERY_S)
