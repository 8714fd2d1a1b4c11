"""What the audit verify says for each way the sealed chain can be tampered with, on both
backends: whether it is ok (`gatehouse audit verify` exits 1 when not), the event it
names and why, how many events checked out before it, and how many wait for the sealer.

Each test plays one forger with a raw connection (the append-only triggers off) and
asserts the whole report, so a verify that accepts the forgery, names another event or
miscounts fails here. The tests at the end give verify the newest checkpoint's signature
check, as `gatehouse audit verify` does: a forger who rewrote the chain and the
checkpoint's hash gets past everything else, but not past the key.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from pipelines.audit import keys as audit_keys
from store import backend, db, items
from store.audit import checkpoints, events, sealer
from tests import forger

EDITED = "its contents do not match its hash (edited after it was written)"
HALF_SEALED = "it has a place in the chain or a hash but not both (tampered before sealing)"
NOT_CHECKPOINTED = "its hash is not the one its signed checkpoint names"
NOT_SIGNED = (
    "its signed checkpoint's signature does not verify with key {}: "
    "the checkpoint or the chain before it was rewritten"
)
UNKNOWN_KEY = (
    "its signed checkpoint names key '{}', which is not a key given here (known: {}); "
    "add the signer's --public-key"
)


async def written(store: db.Store, at: datetime, count: int, tag: str) -> None:
    """`count` events (one new item each), unsealed."""
    for n in range(count):
        await store.write(items.create_sync, "news", "feed", f"{tag}{n}", {"n": n}, at)


async def sealed(store: db.Store, now: datetime, count: int, tag: str = "s") -> None:
    await written(store, now, count, tag)
    assert await sealer.seal(store) == count


def local_key(store: db.Store) -> ed25519.Ed25519PrivateKey:
    store.config.data_dir.mkdir(mode=0o700, exist_ok=True)  # PostgreSQL's may not be made
    return audit_keys.load_or_create(store.config.data_dir)


async def signed_head(
    store: db.Store, now: datetime, key: ed25519.Ed25519PrivateKey | None = None
) -> int:
    """A checkpoint of the newest sealed event, signed by `key` (the data directory's key
    by default) as the witness signs it; returns that event's place."""
    signer = audit_keys.signer(key or local_key(store))
    signed = await store.write(checkpoints.sign_head_sync, signer, now)
    assert signed is not None
    return signed.event_id


async def verify(store: db.Store, batch: int = 5000) -> events.ChainReport:
    return await store.read(lambda conn: events.verify_sync(conn, batch=batch))


async def test_an_intact_chain_counts_what_it_checked_and_what_waits(
    store: db.Store, now: datetime
) -> None:
    """A checkpoint in the middle of the chain that matches, events sealed after it, and
    two waiting (the older one dated): nothing is wrong, at any batch size."""
    await sealed(store, now, 3, tag="a")
    assert await signed_head(store, now) == 3
    await sealed(store, now, 2, tag="b")
    await written(store, now + timedelta(minutes=1), 1, tag="c")
    await written(store, now + timedelta(minutes=2), 1, tag="d")
    expected = events.ChainReport(5, None, pending=2, oldest_pending=now + timedelta(minutes=1))
    for batch in (2, 5000):
        assert await verify(store, batch) == expected


async def test_an_empty_chain_is_intact(store: db.Store) -> None:
    assert await verify(store) == events.ChainReport(0, None, pending=0, oldest_pending=None)


@pytest.mark.parametrize("batch", [2, 5000])
async def test_an_edited_sealed_event_is_named(store: db.Store, now: datetime, batch: int) -> None:
    await sealed(store, now, 5)
    with forger.raw(store, triggers=False) as raw:
        raw.execute("UPDATE events SET reason = 'nothing happened' WHERE seq = 4")
    assert await verify(store, batch) == events.ChainReport(3, events.BrokenLink(4, EDITED))


async def test_an_unsealed_event_sealed_behind_the_sealer_s_back_is_named(
    store: db.Store, now: datetime
) -> None:
    """The triggers allow a seal; a made-up hash at the next place breaks the chain there,
    and the event still waiting is counted."""
    await sealed(store, now, 2)
    await written(store, now, 2, tag="u")
    with forger.raw(store) as raw:
        raw.execute("UPDATE events SET seq = 3, hash = ? WHERE id = 3", ("ab" * 32,))
    assert await verify(store) == events.ChainReport(
        2, events.BrokenLink(3, EDITED), pending=1, oldest_pending=now
    )


async def test_a_reordered_pair_is_named_at_the_first_of_the_two(
    store: db.Store, now: datetime
) -> None:
    await sealed(store, now, 5)
    with forger.raw(store, triggers=False) as raw:  # swap the places of events 3 and 4
        raw.execute("UPDATE events SET seq = -1 WHERE seq = 3")
        raw.execute("UPDATE events SET seq = 3 WHERE seq = 4")
        raw.execute("UPDATE events SET seq = 4 WHERE seq = -1")
    assert await verify(store) == events.ChainReport(2, events.BrokenLink(3, EDITED))


async def test_a_gap_names_the_event_after_it(store: db.Store, now: datetime) -> None:
    await sealed(store, now, 5)
    with forger.raw(store, triggers=False) as raw:
        raw.execute("DELETE FROM events WHERE seq = 3")
    missing = "event 3 is missing (the next one is 4)"
    assert await verify(store) == events.ChainReport(2, events.BrokenLink(4, missing))


async def test_a_tail_cut_by_one_event_names_the_checkpoint_s_event(
    store: db.Store, now: datetime
) -> None:
    """Without the checkpoint, a chain cut at its end would look whole: the newest
    checkpoint names the last event, and that one event is gone."""
    await sealed(store, now, 5)
    assert await signed_head(store, now) == 5
    with forger.raw(store, triggers=False) as raw:
        raw.execute("DELETE FROM events WHERE seq = 5")
    cut = "missing: the sealed chain ends at 4, a signed checkpoint names it (its tail was cut)"
    assert await verify(store) == events.ChainReport(4, events.BrokenLink(5, cut))


async def test_a_chain_rewritten_from_before_a_checkpoint_is_named_at_its_event(
    store: db.Store, now: datetime
) -> None:
    """Every hash recomputed from the edited event on, links included: the chain is
    consistent again, and only the checkpoint signed before the edit can tell."""
    await sealed(store, now, 3, tag="a")
    assert await signed_head(store, now) == 3
    await sealed(store, now, 2, tag="b")
    with forger.raw(store, triggers=False) as raw:
        rehash_from(raw, 2, actor="operator:666")
    assert await verify(store) == events.ChainReport(2, events.BrokenLink(3, NOT_CHECKPOINTED))


def rehash_from(raw: backend.Conn, first: int, actor: str) -> None:
    """Give event `first` another actor and every event from it on the hash its fields
    and the new link call for."""
    rows = raw.execute("SELECT * FROM events WHERE seq >= ? ORDER BY seq", (first,)).fetchall()
    link = raw.execute("SELECT hash FROM events WHERE seq = ?", (first - 1,)).fetchone()[0]
    for row in map(dict, rows):
        row |= {"id": row["seq"], "prev_hash": link}
        if row["seq"] == first:
            row["actor"] = actor
        link = row["hash"] = events.compute_hash(row)
        raw.execute("UPDATE events SET actor = :actor, hash = :hash WHERE seq = :id", row)


@pytest.mark.parametrize("forged", ["hash = 'ab'", "seq = 3"], ids=["hash", "place"])
async def test_an_event_with_a_hash_or_a_place_alone_is_named(
    store: db.Store, now: datetime, forged: str
) -> None:
    """A hash without a place is outside the walk, and a place without a hash would read
    as an edit: verify names either as half-sealed before it walks."""
    await sealed(store, now, 2)
    await written(store, now, 1, tag="u")
    with forger.raw(store, triggers=False) as raw, forger.checks_off(store, raw):
        raw.execute(f"UPDATE events SET {forged} WHERE id = 3")
    report = await verify(store)
    assert (report.ok, report.checked, report.broken) == (
        False, 0, events.BrokenLink(3, HALF_SEALED)
    )  # fmt: skip


def checked_with(*keys: ed25519.Ed25519PrivateKey) -> events.SignatureCheck:
    """The signature check `gatehouse audit verify` gives verify, with these public keys."""
    return audit_keys.checkpoint_check([key.public_key() for key in keys])


def key_id(key: ed25519.Ed25519PrivateKey) -> str:
    return audit_keys.key_id(key.public_key())


async def test_a_good_signature_passes(store: db.Store, now: datetime) -> None:
    await sealed(store, now, 3, tag="a")
    assert await signed_head(store, now) == 3
    await sealed(store, now, 2, tag="b")
    await written(store, now, 1, tag="c")
    report = await events.verify_chain(store, checked_with(local_key(store)))
    assert report == events.ChainReport(5, None, pending=1, oldest_pending=now)


async def test_a_chain_and_checkpoint_rewritten_without_the_key_is_named_by_its_signature(
    store: db.Store, now: datetime
) -> None:
    """The forger rewrites the chain from event 2 and writes a newer checkpoint naming
    event 3's new hash, under the old signature: the walk finds nothing, the key does."""
    await sealed(store, now, 3, tag="a")
    assert await signed_head(store, now) == 3
    await sealed(store, now, 2, tag="b")
    await written(store, now, 1, tag="c")
    with forger.raw(store, triggers=False) as raw:
        rehash_from(raw, 2, actor="operator:666")
        (new_hash,) = raw.execute("SELECT hash FROM events WHERE seq = 3").fetchone()
        old = raw.execute("SELECT signed_at, key_id, signature FROM audit_checkpoints").fetchone()
        raw.execute(
            "INSERT INTO audit_checkpoints (event_id, hash, signed_at, key_id, signature)"
            " VALUES (3, ?, ?, ?, ?)",
            (new_hash, *old),
        )
    unsigned = events.ChainReport(5, None, pending=1, oldest_pending=now)
    assert await verify(store) == unsigned
    key = local_key(store)
    report = await events.verify_chain(store, checked_with(key))
    broken = events.BrokenLink(3, NOT_SIGNED.format(key_id(key)))
    assert report == events.ChainReport(5, broken, pending=1, oldest_pending=now)


async def test_a_checkpoint_signed_by_a_key_not_given_is_named(
    store: db.Store, now: datetime
) -> None:
    stranger = ed25519.Ed25519PrivateKey.generate()
    await sealed(store, now, 4)
    assert await signed_head(store, now, stranger) == 4
    key = local_key(store)
    report = await events.verify_chain(store, checked_with(key))
    problem = UNKNOWN_KEY.format(key_id(stranger), key_id(key))
    assert report == events.ChainReport(4, events.BrokenLink(4, problem))


async def test_without_a_checkpoint_there_is_no_signature_to_check(
    store: db.Store, now: datetime
) -> None:
    await sealed(store, now, 3)
    report = await events.verify_chain(store, checked_with(local_key(store)))
    assert report == events.ChainReport(3, None)


async def test_a_broken_chain_is_named_before_the_checkpoint_s_signature(
    store: db.Store, now: datetime
) -> None:
    """An edited event and a checkpoint signed by a key not given: the edit, the earlier
    and surer finding, is the one named."""
    await sealed(store, now, 4)
    assert await signed_head(store, now, ed25519.Ed25519PrivateKey.generate()) == 4
    with forger.raw(store, triggers=False) as raw:
        raw.execute("UPDATE events SET reason = 'nothing happened' WHERE seq = 2")
    report = await events.verify_chain(store, checked_with(local_key(store)))
    assert report == events.ChainReport(1, events.BrokenLink(2, EDITED))
