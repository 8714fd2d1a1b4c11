"""`gatehouse audit verify` among three PostgreSQL workers: after a change of leader the
newest checkpoint names the new leader's key, and verify says ok on every worker (each
leader stored its key endorsed by the deployment key every worker derives from the bot
token); a checkpoint signed by a key of no worker is refused, also once that key is
written into the store with an endorsement nobody holding the secret made."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from pipelines.audit import keys as audit_keys
from pipelines.audit import trust, witness
from pipelines.service import runtime
from store import db, items, outbox
from store.audit import checkpoints, sealer, signers
from tests import pg_databases

TOKEN = "987654:trust-secret-token-value_ABCDEFGHIJKLMNOP"
#: A bound for the test, not a speed: a loaded machine is slow.
WITHIN_S = 40.0


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_audit_trust_{os.getpid()}"
    server.drop(name)
    try:
        yield server.create(name)
    finally:
        server.drop(name)


def worker_config(tmp_path: Path, name: str, url: str) -> runtime.RuntimeConfig:
    """A worker as `gatehouse run` makes it: the witness with the deployment key."""
    (tmp_path / "pipelines").mkdir(exist_ok=True)
    (tmp_path / name).mkdir(mode=0o700)  # the worker's own data directory, with its key
    return runtime.RuntimeConfig(
        store=db.StoreConfig(data_dir=tmp_path / name, database_url=url),
        pipelines_dir=tmp_path / "pipelines",
        duties=(witness.make_worker(trust.deployment_key(TOKEN)),),
        lease_ttl=timedelta(seconds=2),
    )


async def verify(tmp_path: Path, name: str, url: str) -> tuple[int, str]:
    """`gatehouse audit verify` as an operator runs it on worker `name`."""
    settings = {"DATABASE_URL": url, "TELEGRAM__TOKEN": TOKEN}
    return await verify_in(tmp_path / name, tmp_path / "pipelines", settings)


async def verify_in(
    data_dir: Path, pipelines_dir: Path, settings: dict[str, str]
) -> tuple[int, str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")},
        "GATEHOUSE_DATA_DIR": str(data_dir),
        "GATEHOUSE_PIPELINES_DIR": str(pipelines_dir),
        **{f"GATEHOUSE_{name}": value for name, value in settings.items()},
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "audit", "verify",
        cwd=data_dir.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def verify_all(tmp_path: Path, url: str) -> list[tuple[int, str]]:
    return [await verify(tmp_path, name, url) for name in ("a", "b", "c")]


async def newest_signed_not_by(store: db.Store, key_id: str) -> checkpoints.Checkpoint:
    for _ in range(int(WITHIN_S / 0.05)):
        newest = await store.read(checkpoints.latest_sync)
        if newest is not None and newest.key_id != key_id:
            return newest
        await asyncio.sleep(0.05)
    raise AssertionError(f"no checkpoint signed by a key other than {key_id!r}")


def key_of(tmp_path: Path, name: str) -> str:
    return audit_keys.key_id(audit_keys.load_or_create(tmp_path / name).public_key())


async def forged_head(store: db.Store, now: datetime, key: ed25519.Ed25519PrivateKey) -> None:
    """A new sealed head signed with `key`, as someone holding the database would."""
    await store.write(items.create_sync, "news", "feed", f"f{now:%S%f}", {"title": "x"}, now)
    await sealer.seal(store)
    await store.write(checkpoints.sign_head_sync, audit_keys.signer(key), now)


@pytest.mark.timeout(180)
async def test_verify_is_ok_on_every_worker_after_a_change_of_leader(
    tmp_path: Path, database_url: str, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The new leader signs a head that moved after its takeover on its next pass.
    monkeypatch.setattr(witness, "SIGN_EVERY_S", 0.2)
    store = await db.open(db.StoreConfig(data_dir=tmp_path / "other", database_url=database_url))
    await store.write(items.create_sync, "news", "feed", "g1", {"title": "one"}, now)
    first = await runtime.Runtime.start(worker_config(tmp_path, "a", database_url))
    others = [
        await runtime.Runtime.start(worker_config(tmp_path, name, database_url))
        for name in ("b", "c")
    ]
    assert first.leader.leading and not any(w.leader.leading for w in others)
    await newest_signed_not_by(store, "")
    await store.write(items.create_sync, "news", "feed", "g2", {"title": "two"}, now)
    await first.stop()  # a signs standing down; b or c takes over and signs with its key
    await store.write(items.create_sync, "news", "feed", "g3", {"title": "three"}, now)
    a_key = key_of(tmp_path, "a")
    newest = await newest_signed_not_by(store, a_key)
    try:
        assert newest.key_id in {key_of(tmp_path, "b"), key_of(tmp_path, "c")}
        for code, text in await verify_all(tmp_path, database_url):
            assert code == 0 and text.startswith("ok:"), text
        stored = {row.key_id for row in await store.read(signers.all_sync)}
        assert stored == {a_key, newest.key_id}
        # The key that joined is announced in the operators' chat; the first one was not
        # (the day's head post names it).
        assert await outbox.queued(store, f"audit-key:{newest.key_id}")
        assert not await outbox.queued(store, f"audit-key:{a_key}")

        foreign = ed25519.Ed25519PrivateKey.generate()
        await forged_head(store, now, foreign)
        for code, text in await verify_all(tmp_path, database_url):
            assert code == 1 and "not a key given here" in text, text

        # Writing the key into the store earns it nothing: the endorsement must check
        # with the deployment key, which only the workers' secret derives.
        forged = trust.endorse(trust.deployment_key("not the secret"), foreign, "b:1", now)
        real = audit_keys.key_id(trust.deployment_key(TOKEN).public_key())
        for claim in (forged, dataclasses.replace(forged, endorsed_by=real)):
            await store.write(signers.register_sync, claim)
            for code, text in await verify_all(tmp_path, database_url):
                assert code == 1 and "does not check with this deployment's key" in text, text
    finally:
        for worker in others:
            await worker.stop()
        await store.close()


async def test_a_stored_key_is_trusted_only_with_the_secret_it_was_endorsed_under(
    data_dir: Path, tmp_path: Path, now: datetime
) -> None:
    """One store (SQLite), a checkpoint by another worker's key, endorsed under the token:
    verify trusts it with that token, not without a secret, and not under another
    callback secret (which, when set, is what the deployment key is derived from)."""
    (tmp_path / "pipelines").mkdir()
    other = ed25519.Ed25519PrivateKey.generate()
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await witness.register(store, trust.deployment_key(TOKEN), other, now)
        await forged_head(store, now, other)
    finally:
        await store.close()

    async def run(**settings: str) -> tuple[int, str]:
        return await verify_in(data_dir, tmp_path / "pipelines", settings)

    code, text = await run(TELEGRAM__TOKEN=TOKEN)
    assert code == 0 and text.startswith("ok:"), text
    code, text = await run()
    assert code == 1 and "no deployment secret is set here" in text, text
    code, text = await run(TELEGRAM__TOKEN=TOKEN, TELEGRAM__CALLBACK_SECRET="another")
    assert code == 1 and "does not check with this deployment's key" in text, text
    code, text = await run(TELEGRAM__CALLBACK_SECRET=TOKEN)
    assert code == 0 and text.startswith("ok:"), text
