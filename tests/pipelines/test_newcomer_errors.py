"""Errors a newcomer can act on: a source that cannot connect says why (the name did not
resolve, the connection was refused), once; `check` on an empty pipelines directory says
no pipeline file was found there. Real subprocesses of the `gatehouse` command."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINE = """\
name: news
schedule: 5m
sources:
  - type: rss
    url: {url}
    scope: news
draft:
  drafter: template
dispatch:
  type: none
"""


def gatehouse(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    env |= {
        "GATEHOUSE_PIPELINES_DIR": str(tmp_path / "pipelines"),
        "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
        "GATEHOUSE_TELEGRAM__TOKEN": "123:abc",
        "GATEHOUSE_TELEGRAM__OPERATORS": "1",
    }
    return subprocess.run(
        [str(Path(sys.executable).parent / "gatehouse"), *argv],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip


def closed_port() -> int:
    """A port nothing listens on: bound, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("url", "why"),
    [
        (f"http://127.0.0.1:{closed_port()}/feed.xml",
         "GET {url} failed: the connection was refused (nothing listens on that port)"),
        ("http://no-such-host.invalid/feed.xml",
         "the name no-such-host.invalid did not resolve (gaierror)"),
    ],
)  # fmt: skip
def test_a_source_that_cannot_connect_says_why_once(tmp_path: Path, url: str, why: str) -> None:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "news.yaml").write_text(PIPELINE.format(url=url))
    done = gatehouse(tmp_path, "dry-run", "news")
    assert done.returncode == 1
    assert f"error: source news: {why.format(url=url)}\n" in done.stdout, done.stdout
    assert "ConnectError" not in done.stdout + done.stderr
    # Said once: the report, not the engine's log line again.
    assert url not in done.stderr, done.stderr


def test_check_on_an_empty_directory_says_no_pipeline_file_is_there(tmp_path: Path) -> None:
    (tmp_path / "pipelines").mkdir()
    done = gatehouse(tmp_path, "check")
    assert done.returncode == 0, done
    assert "0 pipeline(s)" not in done.stdout
    assert (
        f"no pipeline file (.yaml, .yml) was found in {tmp_path / 'pipelines'}: nothing will run"
    ) in done.stdout, done.stdout
