"""`gatehouse token create|list|revoke`, with no bot running and through a running one:
the token is printed once and only its hash is ever stored."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.service import runtime as runtime_mod
from store.intake import tokens
from tests import running
from tests.bot.test_cli import gatehouse
from tests.bot.test_cli import pipelines_dir as pipelines_dir  # the CLI tests' pipeline


def every_byte(data_dir: Path) -> bytes:
    return b"".join(path.read_bytes() for path in data_dir.iterdir() if path.is_file())


async def test_tokens_without_a_running_bot(data_dir: Path, pipelines_dir: Path) -> None:
    assert (await gatehouse(data_dir, pipelines_dir, "init"))[0] == 0
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "token", "create", "ci", "--json")
    assert code == 0
    secret = json.loads(out)["token"]
    assert secret.startswith(tokens.PREFIX) and len(secret) > 40
    stored = every_byte(data_dir)
    assert secret.encode() not in stored and tokens.digest(secret).encode() in stored

    code, _, err = await gatehouse(data_dir, pipelines_dir, "token", "create", "ci")
    assert code == 2 and "already named 'ci'" in err
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "token", "list")
    assert code == 0 and "ci" in out and "live" in out and secret not in out
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "token", "revoke", "ci")
    assert (code, out.strip()) == (0, "token ci revoked")
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "token", "list", "--json")
    [listed] = json.loads(out)
    assert listed["name"] == "ci" and listed["revoked_at"] is not None
    code, _, err = await gatehouse(data_dir, pipelines_dir, "token", "revoke", "ci")
    assert code == 2 and "no live token named 'ci'" in err
    code, _, err = await gatehouse(data_dir, pipelines_dir, "token", "create", "CI Bot")
    assert code == 2 and "lowercase letters" in err


async def test_tokens_through_the_running_bot(data_dir: Path, pipelines_dir: Path) -> None:
    async with running.with_control(data_dir, pipelines_dir) as runtime:
        assert isinstance(runtime, runtime_mod.Runtime)
        code, out, err = await gatehouse(data_dir, pipelines_dir, "token", "create", "ci")
        assert code == 0 and "through the running bot" in err
        secret = out.splitlines()[1]
        found = await tokens.authenticate(runtime.store, secret)
        assert found is not None and found.name == "ci"
        code, _, _ = await gatehouse(data_dir, pipelines_dir, "token", "revoke", "ci")
        assert code == 0 and await tokens.authenticate(runtime.store, secret) is None
    assert secret.encode() not in every_byte(data_dir)
