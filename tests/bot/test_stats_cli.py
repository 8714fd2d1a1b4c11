"""gatehouse stats as an operator runs it: a subprocess reading a store with a known
history (tests/store/test_stats.py), as a table and as JSON."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from store import db
from tests.store.test_stats import _history

PIPELINE = """
name: {name}
schedule: manual
sources:
  - type: rss
    url: http://127.0.0.1:9/feed.xml
dispatch:
  type: none
"""


def test_gatehouse_stats_prints_each_pipelines_numbers(tmp_path: Path) -> None:
    for name in ("news", "other"):
        (tmp_path / f"{name}.yaml").write_text(PIPELINE.format(name=name))

    async def record() -> None:
        store = await db.open(db.StoreConfig(data_dir=tmp_path / "data"))
        try:
            await store.write(_history, datetime.now(UTC) - timedelta(days=2))
        finally:
            await store.close()

    asyncio.run(record())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {"GATEHOUSE_DATA_DIR": str(tmp_path / "data"), "GATEHOUSE_PIPELINES_DIR": str(tmp_path)}

    def gatehouse(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "bot.cli", *argv]
        return subprocess.run(
            command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )

    [news] = json.loads(gatehouse("stats", "news", "--json").stdout)
    assert (news["pipeline"], news["entries"], news["carded"], news["approved"]) == (
        "news", 7, 4, 2,
    )  # fmt: skip
    assert news["reject_reasons"] == [["tone", 2]] and news["approval_rate"] == 0.5
    shown = gatehouse("stats", "--days", "30")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "last 30 days" and lines[1].split()[:3] == [
        "pipeline",
        "entries",
        "filtered",
    ]
    assert [line.split()[:2] for line in lines[2:4]] == [["news", "7"], ["other", "1"]]
    assert lines[-1] == "news: top reject reasons: tone (2)"
    refused = gatehouse("stats", "--days", "9")
    assert refused.returncode == 2 and "choose from 7, 30" in refused.stderr
