"""The workers' signing keys in the store, on either backend: a key is kept once, and
endorsed anew in place when its endorsement changes (the deployment's secret did)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from store import db
from store.audit import signers


async def test_a_key_is_kept_once_and_endorsed_anew_in_place(
    store: db.Store, now: datetime
) -> None:
    first = signers.Signer("k1", "ed25519:AAA=", "d1", "sig-1", "host-a:10", now)
    assert await store.write(signers.register_sync, first)
    assert not await store.write(signers.register_sync, first)  # a restart: no news
    again = dataclasses.replace(first, endorsed_by="d2", endorsement="sig-2", worker="host-a:11",
                                registered_at=now + timedelta(hours=1))  # fmt: skip
    assert not await store.write(signers.register_sync, again)
    other = signers.Signer("k2", "ed25519:BBB=", "d2", "sig-3", "host-b:20", now)
    assert await store.write(signers.register_sync, other)
    assert await store.read(signers.all_sync) == [other, again]
