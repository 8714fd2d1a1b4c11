"""Operators' names and signed chain heads, on either backend."""

from __future__ import annotations

from datetime import datetime

import pytest

from store import db, errors, items
from store.audit import checkpoints, sealer
from store.review import people
from tests import forger


async def test_names_are_kept_latest_first_and_read_by_id(store: db.Store, now: datetime) -> None:
    await people.remember(store, 7, "Ana", "ana", now)
    await people.remember(store, 7, "Ana B", None, now)
    await people.remember(store, 5_000_000_000, "Bo", "bo", now)  # past 32 bits, as ids are
    known = await people.many(store, [7, 5_000_000_000, 9])
    assert sorted(known) == [7, 5_000_000_000]
    assert (known[7].first_name, known[7].username) == ("Ana B", None)


async def test_a_checkpoint_signs_the_head_once_and_stays_as_written(
    store: db.Store, now: datetime
) -> None:
    await store.write(items.create_sync, "news", "feed", "g1", {"n": 1}, now)
    assert (
        await store.write(checkpoints.sign_head_sync, lambda body: ("k0", "x"), now) is None
    )  # unsealed
    await sealer.seal(store)
    signed = await store.write(checkpoints.sign_head_sync, lambda body: ("k1", body.hex()), now)
    assert signed is not None and signed.event_id == 1
    assert await store.write(checkpoints.sign_head_sync, lambda body: ("k2", "x"), now) == signed
    with forger.raw(store) as conn, pytest.raises(Exception, match="append-only"):
        conn.execute("UPDATE audit_checkpoints SET key_id = 'forged'")
    assert await store.read(checkpoints.latest_sync) == signed
    with pytest.raises(errors.ConstraintViolation, match="append-only"):
        await store.write(lambda conn: conn.execute("DELETE FROM audit_checkpoints"))
