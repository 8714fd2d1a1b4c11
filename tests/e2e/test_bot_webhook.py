"""Webhook mode end to end: the real bot process registers its webhook with the local
Bot API server and serves it; only requests carrying the secret token are handled."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot.demo.botapi import localapi
from tests.e2e.test_bot_e2e import OPERATOR, TOKEN, BotProcess

SECRET = "webhook-secret-123"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def webhook_bot(tmp_path: Path) -> Iterator[tuple[BotProcess, localapi.LocalBotApi, int]]:
    (tmp_path / "pipelines").mkdir()
    port = free_port()
    with localapi.LocalBotApi(token=TOKEN) as api:
        process = BotProcess(tmp_path, api)
        process.env |= {
            "GATEHOUSE_TELEGRAM__MODE": "webhook",
            "GATEHOUSE_TELEGRAM__WEBHOOK_URL": f"https://bot.example.org:{port}/telegram",
            "GATEHOUSE_TELEGRAM__WEBHOOK_SECRET": SECRET,
            "GATEHOUSE_TELEGRAM__WEBHOOK_LISTEN": "127.0.0.1",
            "GATEHOUSE_TELEGRAM__WEBHOOK_PORT": str(port),
        }
        process.start()
        try:
            yield process, api, port
        finally:
            process.stop()
            log = process.log.read_text()
            assert TOKEN not in log and SECRET not in log


def update(update_id: int, text: str) -> dict[str, object]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": int(time.time()),
            "chat": {"id": OPERATOR, "type": "private"},
            "from": {"id": OPERATOR, "is_bot": False, "first_name": "Op"},
            "text": text,
            "entities": [{"type": "bot_command", "offset": 0, "length": len(text)}],
        },
    }


def post(port: int, body: dict[str, object], secret: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    for _ in range(100):  # the webhook server starts a moment after the process
        try:
            url = f"http://127.0.0.1:{port}/telegram"
            return httpx.post(url, content=json.dumps(body), headers=headers, timeout=5).status_code
        except httpx.ConnectError:
            time.sleep(0.1)
    raise AssertionError("the webhook server never listened")


def test_webhook_mode_serves_only_requests_with_the_secret(
    webhook_bot: tuple[BotProcess, localapi.LocalBotApi, int],
) -> None:
    _, api, port = webhook_bot
    registered = api.wait_for(lambda: api.calls("setWebhook"), timeout=20)
    assert registered[-1].params["url"] == f"https://bot.example.org:{port}/telegram"
    assert registered[-1].params["secret_token"]  # sent (the local server keeps it redacted)

    assert post(port, update(1, "/help"), secret="wrong") == 403
    assert post(port, update(2, "/help"), secret=None) == 403
    assert post(port, update(3, "/help"), secret=SECRET) == 200
    reply = api.wait_for(lambda: api.sent(OPERATOR), timeout=10)
    assert len(reply) == 1 and "/status" in reply[0].text


def test_polling_deletes_a_webhook_left_set_and_then_gets_updates(tmp_path: Path) -> None:
    # A bot moved back from webhook mode: Telegram refuses getUpdates (409) while the
    # webhook stays set, so without deleting it the bot would never hear an operator.
    (tmp_path / "pipelines").mkdir()
    left = "https://hooks.example.org:8443/telegram/path-secret-9f2"
    with localapi.LocalBotApi(token=TOKEN) as api:
        api.state.set_webhook({"url": left, "allowed_updates": None, "has_secret_token": True})
        api.inject_command(OPERATOR, OPERATOR, "/help")  # sent while the webhook was set
        process = BotProcess(tmp_path, api).start()
        try:
            reply = api.wait_for(lambda: api.sent(OPERATOR), timeout=20)[0]
            assert reply.text.startswith("gatehouse\n/status")
            assert api.state.webhook is None
            assert [c.method for c in api.calls() if "webhook" in c.method.lower()] == [
                "getWebhookInfo",
                "deleteWebhook",
            ]
        finally:
            process.stop()
        log = process.log.read_text()
        assert "deleted the webhook left set at https://hooks.example.org:8443/…" in log
        ours = [line for line in log.splitlines() if " DEBUG " not in line]
        assert not [line for line in ours if "path-secret-9f2" in line]  # a path may be secret
