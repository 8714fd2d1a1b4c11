"""No token reaches a log line: the real bot process (webhook mode, the HTTP trigger and
metrics on, an LLM provider and a callback secret configured, logging at DEBUG) is sent
every kind of token it issues or holds through every listener, over real sockets, as a
request tornado refuses (a control character after the value), as an unknown header, in
the path and as a credential; the control socket gets them as requests. Its whole log
is then searched for each token."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.demo.botapi import localapi
from bot.process import control
from tests.bot import test_api
from tests.bot.test_api import free_port
from tests.e2e.test_bot_e2e import TOKEN, BotProcess

LLM_KEY = "sk-e2e-llm-provider-key-0d9f8e7a6b5c"
WEBHOOK_SECRET = "webhook-secret-e2e-51c4a2"
CALLBACK_SECRET = "callback-secret-e2e-7f3b9d0e4a1c"


class Listening(BotProcess):
    def __init__(self, tmp: Path, api: localapi.LocalBotApi) -> None:
        super().__init__(tmp, api)
        self.ports = {"api": free_port(), "metrics": free_port(), "webhook": free_port()}
        self.env |= {
            "GATEHOUSE_API__LISTEN": f"127.0.0.1:{self.ports['api']}",
            "GATEHOUSE_METRICS__LISTEN": f"127.0.0.1:{self.ports['metrics']}",
            "GATEHOUSE_TELEGRAM__MODE": "webhook",
            "GATEHOUSE_TELEGRAM__WEBHOOK_URL": "https://bot.example.org/telegram",
            "GATEHOUSE_TELEGRAM__WEBHOOK_SECRET": WEBHOOK_SECRET,
            "GATEHOUSE_TELEGRAM__WEBHOOK_LISTEN": "127.0.0.1",
            "GATEHOUSE_TELEGRAM__WEBHOOK_PORT": str(self.ports["webhook"]),
            "GATEHOUSE_TELEGRAM__CALLBACK_SECRET": CALLBACK_SECRET,
            "GATEHOUSE_LLM__KIND": "openai",
            "GATEHOUSE_LLM__BASE_URL": "http://127.0.0.1:9/v1",
            "GATEHOUSE_LLM__API_KEY": LLM_KEY,
            "GATEHOUSE_LLM__MODEL": "gpt-e2e",
        }

    def trigger_token(self) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "bot.cli", "token", "create", "ci", "--json"],
            cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return str(json.loads(done.stdout)["token"])


@pytest.fixture
def listening(tmp_path: Path, api: localapi.LocalBotApi) -> Iterator[Listening]:
    (tmp_path / "inbox").mkdir()
    (tmp_path / "pipelines").mkdir()
    pipeline = test_api.PIPELINE.format(inbox=tmp_path / "inbox")
    (tmp_path / "pipelines" / "news.yaml").write_text(pipeline)
    process = Listening(tmp_path, api)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def exchange(port: int, request: bytes) -> bytes:
    """Send one raw request and read the answer until the server closes the connection."""
    deadline = time.monotonic() + 30
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            break
        except ConnectionRefusedError:  # the listener binds a moment after the process
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    with sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def http_requests(token: bytes) -> list[bytes]:
    head = b"Host: 127.0.0.1\r\nConnection: close\r\n"
    return [
        b"GET /metrics HTTP/1.1\r\n" + head + b"Authorization: Bearer " + token + b"\x00\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\n" + head + b"X-Api-Key: " + token + b"\x7f\r\n\r\n",
        b"GET /v1/pipelines/" + token + b"/runs HTTP/1.1\r\n" + head + b"\r\n",
        b"POST /v1/pipelines/news/items HTTP/1.1\r\n" + head + b"Authorization: Bearer "
        + token + b"\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /telegram HTTP/1.1\r\n" + head + b"X-Telegram-Bot-Api-Secret-Token: "
        + token + b"\x01\r\nContent-Length: 2\r\n\r\n{}",
    ]  # fmt: skip


def control_requests(token: str) -> list[bytes]:
    return [
        token.encode() + b"\n",
        json.dumps({"op": token}).encode() + b"\n",
        json.dumps({"op": "approve", "args": {"item": token, "version": token}}).encode() + b"\n",
    ]


def ask_control(data_dir: Path, request: bytes) -> bytes:
    path = control.socket_path(data_dir)
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, "the control socket never listened"
        time.sleep(0.05)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(request)
        return sock.makefile("rb").readline()


def test_no_token_of_any_kind_reaches_the_log_through_any_listener(
    listening: Listening, tmp_path: Path
) -> None:
    for port in listening.ports.values():  # each listens once the bot has started
        exchange(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    tokens = {
        "trigger": listening.trigger_token(),
        "telegram": TOKEN,
        "llm": LLM_KEY,
        "webhook": WEBHOOK_SECRET,
        "callback": CALLBACK_SECRET,
    }
    for token in tokens.values():
        for port in listening.ports.values():
            for request in http_requests(token.encode()):
                assert exchange(port, request).startswith(b"HTTP/1.1 "), (port, request)
        for request in control_requests(token):
            assert b'"ok": false' in ask_control(tmp_path / "data", request)
    assert listening.stop() == 0
    log = listening.log.read_text(errors="replace")
    leaked = {kind for kind, token in tokens.items() if token in log}
    assert not leaked, f"{leaked} in the log"
    # The requests were seen and logged: tornado's refusals and the access log's paths.
    assert log.count("Invalid header value <redacted>") >= 2 * len(tokens), log[-3000:]
    assert "/v1/pipelines/ghtk_<redacted>/runs" in log
