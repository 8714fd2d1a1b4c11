"""The audit export and its offline check, on a real store: an untouched export verifies;
an edited, removed or reordered row, a cut tail and a checkpoint signed by another key
are each caught; JSON lines and CSV both; the key file is private and kept."""

from __future__ import annotations

import csv
import io
import stat
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from pipelines.audit import export as audit_export
from pipelines.audit import keys as audit_keys
from pipelines.audit import witness as audit_witness
from store import db, items, outbox
from store.audit import checkpoints, sealer
from store.items.machine import State


async def some_events(store: db.Store, now: datetime, n: int = 3, tag: str = "g") -> None:
    for i in range(n):
        item = await store.write(
            items.create_sync, "news", "feed", f"{tag}{i}", {"title": f"T{i}"}, now
        )
        assert item is not None
        await store.write(
            items.transition_sync, item.id, State.FAILED, "system", now, reason='x, "y"\n'
        )
    await sealer.seal(store)


async def exported(store: db.Store, fmt: audit_export.Format = "jsonl", **kw: object) -> str:
    out = io.StringIO()
    await audit_export.write(store, out, fmt, **kw)  # type: ignore[arg-type]
    return out.getvalue()


def check(text: str, *keys: ed25519.Ed25519PrivateKey) -> audit_export.Report:
    publics = [audit_keys.parse_public(audit_keys.public_text(key)) for key in keys]
    return audit_export.verify(io.StringIO(text, newline=""), publics)


@pytest.fixture
def key(store: db.Store, data_dir: Path) -> ed25519.Ed25519PrivateKey:
    return audit_keys.load_or_create(data_dir)


async def test_an_untouched_export_verifies_and_each_kind_of_tampering_is_caught(
    store: db.Store, now: datetime, key: ed25519.Ed25519PrivateKey
) -> None:
    await some_events(store, now)
    await audit_witness.sign(store, key, now, post=False)
    text = await exported(store)
    report = check(text, key)
    assert report.ok, report.problems
    assert (report.events, report.checkpoints, report.newest) == (6, 1, (6, now))

    lines = text.splitlines(keepends=True)
    edited = text.replace('"to_state":"failed"', '"to_state":"dispatched"', 1)
    assert "event 2 does not match its hash" in check(edited, key).problems[0]
    removed = "".join(lines[:2] + lines[3:])
    assert "event 3 is missing" in check(removed, key).problems[0]
    swapped = "".join([lines[1], lines[0], *lines[2:]])
    assert not check(swapped, key).ok
    # The tail cut off, its checkpoint kept: the signed head names a later event.
    cut = "".join(lines[:4] + lines[6:])
    assert "the tail is cut: the export ends at event 4" in check(cut, key).problems[0]
    # A checkpoint forged for a different head does not verify.
    forged = text.replace(lines[-1].split('"hash":"')[1][:64], "0" * 64)
    assert not check(forged, key).ok
    other = ed25519.Ed25519PrivateKey.generate()
    report = check(text, other)
    assert not report.ok and not report.problems
    assert "which was not given" in report.unverified[0]
    # The key's id copied onto another key's signature: the signature still fails.
    kid = audit_keys.key_id(key.public_key())
    wrong = audit_keys.signer(other)(b"anything")[1]
    signature = lines[-1].split('"signature":"')[1].split('"')[0]
    assert f"not signed by key {kid}" in check(text.replace(signature, wrong), key).problems[0]


async def test_an_export_across_a_key_change_verifies_with_both_keys(
    store: db.Store, now: datetime, key: ed25519.Ed25519PrivateKey, tmp_path: Path
) -> None:
    """After a restore under a new key, older checkpoints name the old one."""
    await some_events(store, now, 2)
    await audit_witness.sign(store, key, now, post=False)
    (tmp_path / "restored").mkdir(mode=0o700)
    new_key = audit_keys.load_or_create(tmp_path / "restored")
    await some_events(store, now + timedelta(days=1), 2, tag="later")
    await audit_witness.sign(store, new_key, now + timedelta(days=1), post=False)
    text = await exported(store)
    both = check(text, new_key, key)
    assert both.ok, both.problems
    assert (both.events, both.checkpoints) == (8, 2)
    old_id = audit_keys.key_id(key.public_key())
    only_new = check(text, new_key)
    assert not only_new.problems and len(only_new.unverified) == 1
    assert f"names key '{old_id}', which was not given" in only_new.unverified[0]


async def test_csv_round_trips_texts_and_missing_values(
    store: db.Store, now: datetime, key: ed25519.Ed25519PrivateKey
) -> None:
    await some_events(store, now, 2)
    await audit_witness.sign(store, key, now, post=False)
    text = await exported(store, "csv")
    assert text.startswith("record,id,entity")
    assert check(text, key).ok, check(text, key).problems
    assert not check(text.replace("feed", "feeD", 1).replace("fetched", "fetcheD", 1), key).ok
    rows = list(csv.reader(io.StringIO(text, newline="")))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows[:2] + rows[3:])
    assert "event 2 is missing" in check(out.getvalue(), key).problems[0]


async def test_since_exports_from_a_date_and_the_chain_still_checks(
    store: db.Store, now: datetime, key: ed25519.Ed25519PrivateKey
) -> None:
    await some_events(store, now, 1)
    later = now + timedelta(days=1)
    await some_events_later(store, later)
    await audit_witness.sign(store, key, later, post=False)
    report = check(await exported(store, since=later), key)
    assert report.ok and report.first_id == 3 and report.last_id == 4


async def some_events_later(store: db.Store, at: datetime) -> None:
    item = await store.write(items.create_sync, "news", "feed", "later", {"title": "L"}, at)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.FAILED, "system", at, reason="late")
    await sealer.seal(store)


async def test_malformed_input_is_named_not_crashed_on(key: ed25519.Ed25519PrivateKey) -> None:
    assert "line 1 is not JSON" in check("{nope\n", key).problems[0]
    assert "neither a JSON record nor the CSV header" in check("a,b\n", key).problems[0]
    assert "holds no events" in check("", key).problems[0]
    assert "must be a whole number" in check('{"record":"event","id":"x","entity":"item",'
        '"entity_id":"1","from_state":null,"to_state":"new","actor":"system","attempt":1,'
        '"reason":null,"at":1,"prev_hash":"0","hash":"0"}\n', key).problems[0]  # fmt: skip
    with pytest.raises(audit_keys.BadKey, match="ed25519:<base64>"):
        audit_keys.parse_public("ssh-ed25519 AAAA")
    with pytest.raises(audit_keys.BadKey, match="32 bytes"):
        audit_keys.parse_public("ed25519:AAAA")


async def test_the_key_is_private_and_kept_and_the_head_is_posted_once_a_day(
    store: db.Store, data_dir: Path, now: datetime, key: ed25519.Ed25519PrivateKey
) -> None:
    path = data_dir / audit_keys.KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = audit_keys.load_or_create(data_dir)
    assert audit_keys.public_text(again) == audit_keys.public_text(key)
    assert await audit_witness.sign(store, key, now, post=True) is None  # no events yet
    await some_events(store, now, 1)
    first = await audit_witness.sign(store, key, now, post=True)
    await some_events_later(store, now + timedelta(hours=1))
    second = await audit_witness.sign(store, key, now + timedelta(hours=1), post=True)
    assert first is not None and second is not None and second.event_id > first.event_id
    # Signing an unchanged head adds no checkpoint.
    assert await audit_witness.sign(store, key, now + timedelta(hours=2), post=True) == second
    posts = [r for r in await outbox.due(store, now + timedelta(days=1), ["alert"])]
    assert len(posts) == 1 and f"audit head #{first.event_id} " in posts[0].payload["text"]
    text = posts[0].payload["text"]  # one short line: the key by its id, no base64
    assert f"key {first.key_id[:8]}…" in text and audit_keys.public_text(key) not in text
    assert "`" not in text  # shown as written: a literal backtick would be noise
    assert (await store.read(checkpoints.latest_sync)) == second
