"""While the bot runs, the CLI lists, checks and reconciles the pipelines the bot has
loaded (asked over its control socket), even when its own settings point elsewhere."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pipelines.service import runtime as runtime_mod
from tests import running

BOT_PIPELINE = """\
name: news
schedule: manual
sources:
  - type: folder
    path: {notes}
dispatch:
  type: file
  path: {out}
"""
#: What the CLI's own settings point at: a pipeline the bot never loaded.
STRAY_PIPELINE = BOT_PIPELINE.replace("name: news", "name: stray")


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[tuple[runtime_mod.Runtime, Path]]:
    (tmp_path / "notes").mkdir()
    loaded = tmp_path / "bot-pipelines"
    loaded.mkdir()
    out = tmp_path / "out"
    (loaded / "news.yaml").write_text(BOT_PIPELINE.format(notes=tmp_path / "notes", out=out))
    # Directly under /tmp: a Unix socket path must be short.
    with tempfile.TemporaryDirectory(prefix="gh-", dir="/tmp") as name:
        data_dir = Path(name) / "data"
        data_dir.mkdir(mode=0o700)
        async with running.with_control(data_dir, loaded) as started:
            yield started, out


async def gatehouse(tmp_path: Path, data_dir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    elsewhere = tmp_path / "cli-pipelines"
    elsewhere.mkdir(exist_ok=True)
    (elsewhere / "stray.yaml").write_text(
        STRAY_PIPELINE.format(notes=tmp_path / "notes", out=tmp_path / "stray-out")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env["GATEHOUSE_PIPELINES_DIR"] = str(elsewhere)
    command = [str(Path(sys.executable).parent / "gatehouse"), "--data-dir", str(data_dir), *argv]
    return await asyncio.to_thread(
        subprocess.run,
        command,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_reads_and_writes_use_the_running_bots_pipelines(
    bot: tuple[runtime_mod.Runtime, Path], tmp_path: Path
) -> None:
    started, out = bot
    data_dir = started.store.config.data_dir

    status = await gatehouse(tmp_path, data_dir, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert [p["name"] for p in json.loads(status.stdout)["overview"]["pipelines"]] == ["news"]
    runs = await gatehouse(tmp_path, data_dir, "runs", "news", "--json")
    assert runs.returncode == 0, runs.stderr

    paused = await gatehouse(tmp_path, data_dir, "pause", "news")
    assert (paused.returncode, paused.stdout.strip()) == (0, "news: paused"), paused.stderr
    again = await gatehouse(tmp_path, data_dir, "pause", "news")
    assert again.stdout.strip() == "news: already paused"
    stray = await gatehouse(tmp_path, data_dir, "pause", "stray")
    assert stray.returncode == 2
    assert "unknown pipeline 'stray'" in stray.stderr and "Pipelines: news" in stray.stderr

    reconciled = await gatehouse(tmp_path, data_dir, "reconcile", "--json")
    assert reconciled.returncode == 0, reconciled.stderr
    [folder] = json.loads(reconciled.stdout)
    assert (folder["folder"], folder["pipelines"]) == (str(out), ["news"])
