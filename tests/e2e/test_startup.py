"""Startup failures as an operator meets them: the real `python -m bot` process against
the local Bot API server, each failure one clear line and never the token."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import early
from bot import settings as settings_mod
from bot.demo.botapi import localapi
from store.backends import datadir

TOKEN = "987654:startup-secret-token-value_ABCDEFGHIJ"
SECRET = TOKEN.split(":", 1)[1]
OPERATOR = 1001
REJECTED = "gatehouse: the bot token was rejected by Telegram (check GATEHOUSE_TELEGRAM__TOKEN)"
UNREACHABLE = re.compile(r"Telegram is unreachable \(attempt (\d+): ")


def env(tmp: Path, base_url: str, level: str = "DEBUG") -> dict[str, str]:
    (tmp / "pipelines").mkdir(exist_ok=True)
    return {
        **os.environ,
        "GATEHOUSE_TELEGRAM__TOKEN": TOKEN,
        "GATEHOUSE_TELEGRAM__BASE_URL": base_url,
        "GATEHOUSE_TELEGRAM__OPERATORS": str(OPERATOR),
        "GATEHOUSE_DATA_DIR": str(tmp / "data"),
        "GATEHOUSE_PIPELINES_DIR": str(tmp / "pipelines"),
        "GATEHOUSE_LOG_LEVEL": level,
    }


def start(tmp: Path, environ: dict[str, str], *argv: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", *(argv or ("bot",))]
    with (tmp / "bot.log").open("a") as log:
        return subprocess.Popen(command, cwd=tmp, env=environ, stdout=log, stderr=log, text=True)


def wait_log(tmp: Path, pattern: str, count: int = 1, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = (tmp / "bot.log").read_text()
        if len(re.findall(pattern, text)) >= count:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} x{count} not in the log:\n{text}")


def stop(proc: subprocess.Popen[str]) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((localapi.HOST, 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


def test_a_rejected_token_is_one_line_exit_2_and_never_printed(tmp_path: Path) -> None:
    # The server knows another token: getMe answers 401, as Telegram does.
    with localapi.LocalBotApi(token="111:another-token-entirely_ABCDEFGHIJKLMNOPQRS") as server:
        proc = subprocess.run(
            [sys.executable, "-m", "bot"], cwd=tmp_path, env=env(tmp_path, server.base_url),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert [c.method.lower() for c in server.calls()] == ["getme"]
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == REJECTED
    assert TOKEN not in output and SECRET not in output
    assert "Traceback" not in output
    # Refused before the engine started: no database was created.
    assert not (tmp_path / "data" / datadir.DB_NAME).exists()


def test_an_unreachable_network_is_retried_one_line_each_then_the_bot_starts(
    tmp_path: Path,
) -> None:
    port = free_port()
    proc = start(tmp_path, env(tmp_path, f"http://{localapi.HOST}:{port}/bot", level="INFO"))
    try:
        wait_log(tmp_path, UNREACHABLE.pattern, count=3)
        with localapi.LocalBotApi(token=TOKEN, port=port):
            text = wait_log(tmp_path, "bot started")
            assert stop(proc) == 0
    finally:
        stop(proc)
    text = (tmp_path / "bot.log").read_text()
    attempts = [int(n) for n in UNREACHABLE.findall(text)]
    assert attempts == list(range(1, len(attempts) + 1)) and len(attempts) >= 3
    # One line per attempt and nothing else about it: no traceback, no other warning.
    warnings = [line for line in text.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(warnings) == len(attempts), warnings
    assert "Traceback" not in text and TOKEN not in text


def test_an_unreachable_network_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    proc = start(tmp_path, env(tmp_path, f"http://{localapi.HOST}:{free_port()}/bot"))
    wait_log(tmp_path, UNREACHABLE.pattern)
    assert stop(proc) == 0
    text = (tmp_path / "bot.log").read_text()
    assert "Traceback" not in text and SECRET not in text


@pytest.mark.parametrize("argv", [("bot",), ("bot.cli", "run")], ids=["python-m-bot", "cli-run"])
def test_a_second_instance_is_refused_at_once(
    tmp_path: Path, api: localapi.LocalBotApi, argv: tuple[str, ...]
) -> None:
    environ = env(tmp_path, api.base_url)
    first = start(tmp_path, environ)
    try:
        wait_log(tmp_path, "bot started")
        lock = tmp_path / "data" / datadir.LOCK_NAME
        assert datadir.holder_pid(lock) == first.pid
        begun = time.perf_counter()
        second = subprocess.run(
            [sys.executable, "-m", *argv], cwd=tmp_path, env=environ,
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        elapsed = time.perf_counter() - begun
        # A figure to read, not to assert: this machine's load varies.
        print(f"second instance ({' '.join(argv)}) refused in {elapsed:.3f} s")
        assert second.returncode == 2
        assert second.stdout == ""
        assert second.stderr.splitlines() == [
            f"gatehouse: the store is already open in process {first.pid} "
            f"(lock {lock}); stop it first, or use a read command, which works alongside it"
        ]
        # Nothing changed for the first: it still holds the lock and runs.
        assert datadir.holder_pid(lock) == first.pid and first.poll() is None
    finally:
        assert stop(first) == 0


def test_an_unusable_data_dir_is_one_line_before_the_bot_loads(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a directory")
    environ = env(tmp_path, f"http://{localapi.HOST}:{free_port()}/bot")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bot"], cwd=tmp_path, env=environ,
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert lines == [f"gatehouse: data directory {tmp_path / 'data'} exists and is not a directory"]
    # Refused before the bot, PTB or pydantic were imported.
    assert not re.search(r"\|\s+(telegram|pydantic|bot\.app)$", proc.stderr, re.MULTILINE)


@pytest.mark.parametrize(
    ("variables", "env_file", "expected"),
    [
        ({"GATEHOUSE_DATA_DIR": "from-env"}, "GATEHOUSE_DATA_DIR=from-file\n", "from-env"),
        ({"gatehouse_data_dir": "lower-case"}, None, "lower-case"),
        ({}, "GATEHOUSE_DATA_DIR=from-file\n", "from-file"),
        ({}, "gatehouse_data_dir='quoted'\n", "quoted"),
        ({}, None, "data"),
    ],
)
def test_the_early_data_dir_is_the_one_the_settings_name(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variables: dict[str, str],
    env_file: str | None,
    expected: str,
) -> None:
    for key in [k for k in os.environ if k.upper() == "GATEHOUSE_DATA_DIR"]:
        monkeypatch.delenv(key)
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    if env_file is not None:
        (tmp_path / ".env").write_text(env_file)
    assert early.data_dir() == Path(expected) == settings_mod.load().data_dir


def test_the_store_adopts_the_early_lock(tmp_path: Path) -> None:
    data = tmp_path / "data"
    datadir.claim(data)
    assert datadir.is_locked(data) == os.getpid()
    lock = datadir.WriterLock(data)
    lock.acquire()  # adopted, not refused by this process's own early lock
    lock.release()
    assert datadir.is_locked(data) is None
