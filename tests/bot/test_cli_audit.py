"""`gatehouse audit key|export|verify --export` as a subprocess on a real store: CSV and
JSON lines verify offline with the key given as text or as a file; a missing file, an
existing output and a bad key are each one clear line and exit code 2."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519

from pipelines.audit import keys as audit_keys
from pipelines.audit import witness
from store import db, sealer
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
    assert code == 1 and "which was not given" in text and "add its --public-key" in text
    given = ("--public-key", stranger, "--public-key", str(key_file))
    code, text, _ = await run("verify", "--export", str(out), *given)
    assert code == 0 and "1 signed checkpoints" in text, text
