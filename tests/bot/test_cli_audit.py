"""`gatehouse audit key|export|verify --export` as a subprocess on a real store: CSV and
JSON lines verify offline with the key given as text or as a file; a missing file, an
existing output and a bad key are each one clear line and exit code 2."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519

from pipelines.audit import keys as audit_keys
from pipelines.audit import witness
from store import db
from store.audit import events, sealer
from tests.bot import test_cli

pipelines_dir = test_cli.pipelines_dir  # the CLI tests' pipeline folder (a fixture)


async def test_export_and_verify_from_the_terminal(
    data_dir: Path, pipelines_dir: Path, tmp_path: Path, now: datetime
) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        for minute in range(3):
            await test_cli.dropped_item(store, now + timedelta(minutes=minute))
        await sealer.seal(store)
        await witness.sign(store, audit_keys.load_or_create(data_dir), now, post=False)
    finally:
        await store.close()

    async def run(*args: str) -> tuple[int, str, str]:
        return await test_cli.gatehouse(data_dir, pipelines_dir, "audit", *args)

    code, key, _ = await run("key")
    assert code == 0 and key.startswith("ed25519:")
    key_file = tmp_path / "audit.pub"
    key_file.write_text(key)
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"audit.{fmt}"
        code, _, err = await run("export", "--format", fmt, "--out", str(out))
        assert code == 0 and "exported 6 events" in err
        code, text, _ = await run("verify", "--export", str(out), "--public-key", str(key_file))
        assert code == 0 and "events 1 to 6 chain intact, 1 signed checkpoints" in text, text
    code, _, err = await run("export", "--out", str(tmp_path / "audit.jsonl"))
    assert code == 2 and "exists already" in err
    code, _, err = await run("verify", "--export", str(tmp_path / "nope"), "--public-key", key)
    assert code == 2 and "cannot read" in err and "nope" in err
    code, _, err = await run("verify", "--export", str(out), "--public-key", "ed25519:AAAA")
    assert code == 2 and "32 bytes in base64" in err
    code, _, err = await run("verify", "--export", str(out))
    assert code == 2 and "needs --public-key" in err
    stranger = audit_keys.public_text(ed25519.Ed25519PrivateKey.generate())
    code, text, _ = await run("verify", "--export", str(out), "--public-key", stranger)
    assert code == 1 and text.startswith("NOT VERIFIED (a signing key is missing): ")
    assert "which was not given" in text and "add its --public-key" in text
    assert "BROKEN" not in text
    given = ("--public-key", stranger, "--public-key", str(key_file))
    code, text, _ = await run("verify", "--export", str(out), *given)
    assert code == 0 and "1 signed checkpoints" in text, text


def _rewrite_history(db_path: Path) -> None:
    """A forger with the database file: edit sealed event 2, recompute every later hash
    and the newest checkpoint's hash, leaving the signature as it was."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        for trigger in ("events_no_update", "audit_checkpoints_no_update"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("UPDATE events SET actor = 'operator:666' WHERE seq = 2")
        conn.row_factory = sqlite3.Row
        prev = events.GENESIS
        for row in conn.execute("SELECT * FROM events WHERE seq IS NOT NULL ORDER BY seq"):
            fields = {**dict(row), "id": row["seq"], "prev_hash": prev}
            prev = events.compute_hash(fields)
            conn.execute("UPDATE events SET hash = ? WHERE seq = ?", (prev, row["seq"]))
        conn.execute("UPDATE audit_checkpoints SET hash = ?", (prev,))
    finally:
        conn.close()


async def test_verify_in_place_names_a_checkpoint_whose_signature_was_not_rewritten(
    data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    """Hashes can be recomputed by anyone with the file; the signature needs the key."""
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        for minute in range(3):
            await test_cli.dropped_item(store, now + timedelta(minutes=minute))
        await sealer.seal(store)
        signed = await witness.sign(store, audit_keys.load_or_create(data_dir), now, post=False)
    finally:
        await store.close()
    assert signed is not None

    async def verify(*args: str) -> tuple[int, str, str]:
        return await test_cli.gatehouse(data_dir, pipelines_dir, "audit", "verify", *args)

    code, text, _ = await verify()
    assert code == 0 and "ok: 6 events" in text, text
    _rewrite_history(data_dir / "gatehouse.db")
    code, text, _ = await verify()
    assert code == 1, text
    assert f"BROKEN at event {signed.event_id}" in text and "signature does not verify" in text
    assert signed.key_id in text, text


async def test_verify_in_place_needs_the_key_a_checkpoint_names(
    data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    """A checkpoint signed by another worker's key (or the key before a restore) is checked
    with that key given as --public-key; without it, it cannot vouch for the chain."""
    other = ed25519.Ed25519PrivateKey.generate()
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await test_cli.dropped_item(store, now)
        await sealer.seal(store)
        await witness.sign(store, other, now, post=False)
    finally:
        await store.close()

    async def verify(*args: str) -> tuple[int, str, str]:
        return await test_cli.gatehouse(data_dir, pipelines_dir, "audit", "verify", *args)

    code, text, _ = await verify()
    assert code == 1 and "not a key given here" in text and "--public-key" in text, text
    code, text, _ = await verify("--public-key", audit_keys.public_text(other))
    assert code == 0 and "ok: 2 events" in text, text
