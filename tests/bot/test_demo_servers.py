"""The demo's servers against what any web page could send them, over raw sockets.

Both listen on loopback only, but a page in the user's browser can reach loopback: a
cross-origin form POST, a DNS-rebound host name, a lying Content-Length. Each is refused,
and each refusal leaves the chat exactly as it was.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from bot.demo import webchat
from bot.demo.botapi import http as localapi_http
from bot.demo.botapi import localapi
from bot.web import charts

USER = 1001


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi() as server:
        yield server


@pytest.fixture
def web(api: localapi.LocalBotApi) -> Iterator[webchat.WebChat]:
    chat = webchat.WebChat(api, operators=(USER,)).start()
    try:
        yield chat
    finally:
        chat.stop()


async def raw(port: int, request: bytes) -> tuple[int, dict[str, Any]]:
    """Send `request` as is; the status and the JSON body of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)  # every answer here closes
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body) if body else {}


def request(
    method: str,
    path: str,
    port: int,
    *,
    body: bytes = b"",
    content_type: str = "application/json",
    length: str | None = None,
    host: str | None = None,
    origin: str | None = None,
) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host if host is not None else f'127.0.0.1:{port}'}",
        "Connection: close",
    ]
    if origin:
        lines.append(f"Origin: {origin}")
    if body or length is not None:
        lines += [f"Content-Type: {content_type}", f"Content-Length: {length or len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chat_state(api: localapi.LocalBotApi) -> tuple[Any, ...]:
    """Everything a refused request must not change."""
    return (
        api.state.revision,
        api.state.pending_update_count(),
        [m.text for m in api.messages(USER)],
        len(api.calls()),
    )


async def test_control_changes_state_only_on_a_json_post(api: localapi.LocalBotApi) -> None:
    before = chat_state(api)
    command = {"chat_id": USER, "user_id": USER, "text": "/run news"}
    form = f"chat_id={USER}&user_id={USER}&text=%2Frun+news".encode()
    evil = "http://evil.example"
    refusals = [
        (
            request("POST", "/control/inject_command", api.port, body=form, origin=evil,
                    content_type="application/x-www-form-urlencoded"),
            415,
            "Unsupported Media Type: /control takes JSON (application/json), not "
            "application/x-www-form-urlencoded",
        ),
        (
            request("POST", "/control/inject_command", api.port, body=json.dumps(command).encode(),
                    content_type="text/plain", origin=evil),
            415,
            "Unsupported Media Type: /control takes JSON (application/json), not text/plain",
        ),
        (
            # An empty form whose action carries the parameters in its query string.
            request("POST", f"/control/inject_command?chat_id={USER}&user_id={USER}&text=/run",
                    api.port, length="0", content_type="application/x-www-form-urlencoded",
                    origin=evil),
            415,
            "Unsupported Media Type: /control takes JSON (application/json), not "
            "application/x-www-form-urlencoded",
        ),
        (
            request("POST", f"/control/inject_command?chat_id={USER}&user_id={USER}&text=/run",
                    api.port, origin=evil),
            415,
            "Unsupported Media Type: /control takes JSON (application/json), not no Content-Type",
        ),
        (
            request("GET", f"/control/inject_command?chat_id={USER}&user_id={USER}&text=/run",
                    api.port),
            405,
            "Method Not Allowed: inject_command changes state; POST its parameters as JSON",
        ),
    ]  # fmt: skip
    for sent, status, description in refusals:
        assert await raw(api.port, sent) == (
            status,
            {"ok": False, "error_code": status, "description": description},
        )
        assert chat_state(api) == before
    # Reads stay a plain GET; the same command as JSON is what works.
    assert (await raw(api.port, request("GET", "/control/info", api.port)))[0] == 200
    body = json.dumps(command).encode()
    ok, answer = await raw(
        api.port, request("POST", "/control/inject_command", api.port, body=body)
    )
    assert ok == 200 and answer["result"]["message"]["text"] == "/run news"
    assert api.state.pending_update_count() == 1


@pytest.mark.parametrize("host", ["evil.example:{port}", "127.0.0.1.nip.example:{port}", ""])
async def test_a_foreign_host_is_refused_by_both_servers(
    api: localapi.LocalBotApi, web: webchat.WebChat, host: str
) -> None:
    before = chat_state(api)
    body = json.dumps({"chat_id": USER, "user_id": USER, "text": "/pause news"}).encode()
    shown = host.format(port=api.port)
    status, answer = await raw(
        api.port, request("POST", "/control/inject_command", api.port, body=body, host=shown)
    )
    assert (status, answer["description"]) == (
        403,
        f"Forbidden: Host {shown!r} is not this server; use 127.0.0.1:{api.port} or "
        f"localhost:{api.port}",
    )
    status, _ = await raw(api.port, request("GET", "/bot1:abc/getMe", api.port, host=shown))
    assert status == 403
    shown = host.format(port=web.port)
    send = json.dumps({"text": "/pause news"}).encode()
    status, answer = await raw(
        web.port, request("POST", "/api/send", web.port, body=send, host=shown)
    )
    assert status == 403 and answer["error"].startswith(f"Forbidden: Host {shown!r}")
    status, _ = await raw(web.port, request("GET", "/api/chat", web.port, host=shown))
    assert status == 403
    assert chat_state(api) == before
    # By name, the same requests are served.
    local = f"localhost:{api.port}"
    assert (await raw(api.port, request("GET", "/bot1:abc/getMe", api.port, host=local)))[0] == 200


@pytest.mark.parametrize(
    ("length", "status", "description"),
    [
        ("-1", 400, "Bad Request: Content-Length must be one whole number of bytes"),
        ("abc", 400, "Bad Request: Content-Length must be one whole number of bytes"),
        ("+5", 400, "Bad Request: Content-Length must be one whole number of bytes"),
        (
            str(200 * 1024 * 1024),
            413,
            f"Request Entity Too Large: at most {localapi_http.MAX_BODY} bytes",
        ),
    ],
)
async def test_a_bad_content_length_is_refused_by_both_servers(
    api: localapi.LocalBotApi, web: webchat.WebChat, length: str, status: int, description: str
) -> None:
    before = chat_state(api)
    body = json.dumps({"chat_id": USER, "user_id": USER, "text": "/run news"}).encode()
    sent = request("POST", "/control/inject_command", api.port, body=body, length=length)
    assert await raw(api.port, sent) == (
        status,
        {"ok": False, "error_code": status, "description": description},
    )
    sent = request("POST", "/bot1:abc/sendMessage", api.port, body=body, length=length)
    assert (await raw(api.port, sent))[0] == status
    send = json.dumps({"text": "/run news"}).encode()
    code, answer = await raw(
        web.port, request("POST", "/api/send", web.port, body=send, length=length)
    )
    assert code == 400
    assert answer["error"] in (
        description,
        f"Request Entity Too Large: at most {webchat.MAX_BODY} bytes",
    )
    assert chat_state(api) == before


async def test_message_text_is_capped_at_telegrams_4096(
    api: localapi.LocalBotApi, web: webchat.WebChat
) -> None:
    before = chat_state(api)
    long = "x" * 60_000
    body = json.dumps({"chat_id": USER, "from_user_id": USER, "text": long}).encode()
    status, answer = await raw(
        api.port, request("POST", "/control/inject_message", api.port, body=body)
    )
    assert (status, answer["description"]) == (
        400,
        "inject_message: Bad Request: message is too long (60000 characters; at most 4096)",
    )
    send = json.dumps({"text": long}).encode()
    status, answer = await raw(web.port, request("POST", "/api/send", web.port, body=send))
    assert (status, answer) == (
        400,
        {"error": "Bad Request: message is too long (60000 characters; at most 4096)"},
    )
    form = b"text=hello"
    status, answer = await raw(
        web.port,
        request("POST", "/api/send", web.port, body=form,
                content_type="application/x-www-form-urlencoded"),
    )  # fmt: skip
    assert (status, answer) == (
        400,
        {"error": "send the fields as JSON (Content-Type: application/json)"},
    )
    assert chat_state(api) == before
    # At the limit, the message goes through.
    fits = json.dumps({"text": "y" * 4096}).encode()
    assert (await raw(web.port, request("POST", "/api/send", web.port, body=fits)))[0] == 200
    assert [len(m.text) for m in api.messages(USER)] == [4096]


def test_the_web_chat_serves_a_photo_the_bot_sent(
    api: localapi.LocalBotApi, web: webchat.WebChat
) -> None:
    png = charts.budget_png([], datetime(2026, 12, 1, tzinfo=UTC))
    sent = httpx.post(
        f"{api.base_url}1:x/sendPhoto",
        data={"chat_id": str(USER), "caption": "a chart"},
        files={"photo": ("chart.png", png, "image/png")},
    ).json()["result"]
    assert sent["caption"] == "a chart" and "text" not in sent
    base = f"http://127.0.0.1:{web.port}"
    [message] = httpx.get(f"{base}/api/chat").json()["messages"]
    assert message["photo"]["width"] == charts.WIDTH and message["text"] == "a chart"
    picture = httpx.get(f"{base}/api/photo", params={"message_id": message["message_id"]})
    assert picture.headers["Content-Type"] == "image/png" and picture.content == png
    assert httpx.get(f"{base}/api/photo", params={"message_id": 99}).status_code == 404
    assert httpx.get(f"{base}/api/photo", params={"message_id": "x"}).status_code == 400
