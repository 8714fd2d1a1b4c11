"""The local Bot API server, driven by a real python-telegram-bot Application over sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from telegram import ForceReply, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram import error as tg_error
from telegram.ext import (
    AIORateLimiter,
    Application,
    ApplicationBuilder,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
)

from bot.demo.botapi import html as localapi_html
from bot.demo.botapi import localapi

TOKEN = "123456:local-test-token_x"
CHAT = 4242
USER = 4242
KEYBOARD = InlineKeyboardMarkup(
    [
        [
            InlineKeyboardButton("Approve", callback_data="a:1"),
            InlineKeyboardButton("Reject", callback_data="r:1"),
        ]
    ]
)


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


def build_app(
    api: localapi.LocalBotApi, *, retries: int | None = None
) -> Application[Any, Any, Any, Any, Any, Any]:
    """A real PTB application pointed at the local server; `retries` adds AIORateLimiter."""
    builder = (
        ApplicationBuilder().token(TOKEN).base_url(api.base_url).base_file_url(api.base_file_url)
    )
    if retries is None:
        return builder.build()
    return builder.rate_limiter(AIORateLimiter(max_retries=retries)).build()


@contextlib.asynccontextmanager
async def polling(app: Application[Any, Any, Any, Any, Any, Any]) -> AsyncIterator[None]:
    """Own the lifecycle as the product does; a 1 s long poll keeps shutdown quick."""
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0, timeout=1)
        try:
            yield
        finally:
            await app.updater.stop()
            await app.stop()


async def start(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """Reply to /start with the arguments and a keyboard."""
    assert update.effective_message is not None
    await update.effective_message.reply_text(
        f"hello {' '.join(context.args or [])}", reply_markup=KEYBOARD, do_quote=True
    )


async def tap(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
    """Answer the tap and edit the card to say who decided."""
    query = update.callback_query
    assert query is not None and query.message is not None
    await query.answer(text=f"done: {query.data}")
    await query.edit_message_text(
        f"approved by {query.from_user.id} (was #{query.message.message_id})"
    )


async def test_command_gets_a_reply_from_a_polling_bot(api: localapi.LocalBotApi) -> None:
    app = build_app(api)
    app.add_handler(CommandHandler("start", start))
    async with polling(app):
        update = api.inject_command(CHAT, USER, "/start now please")
        [reply] = await api.await_for(lambda: api.sent(CHAT))
    assert update["message"]["entities"] == [{"type": "bot_command", "offset": 0, "length": 6}]
    assert reply.text == "hello now please"
    assert reply.from_bot and reply.sender["id"] == 123456 and reply.sender["is_bot"]
    assert reply.reply_to_message_id == update["message"]["message_id"]
    assert reply.reply_markup == KEYBOARD.to_dict()
    assert [m.from_bot for m in api.messages(CHAT)] == [False, True]
    assert api.state.tokens_used == [TOKEN]


async def test_tap_is_answered_and_the_message_edited(api: localapi.LocalBotApi) -> None:
    app = build_app(api)
    app.add_handler(CallbackQueryHandler(tap))
    async with polling(app):
        card = await app.bot.send_message(CHAT, "draft #1", reply_markup=KEYBOARD)
        query_id = api.inject_callback(CHAT, USER, card.message_id, "a:1")
        await api.await_for(lambda: api.sent(CHAT)[0].version == 2)
    [edited] = api.sent(CHAT)
    assert edited.text == f"approved by {USER} (was #{card.message_id})"
    assert edited.reply_markup is None  # an edit without reply_markup drops the keyboard
    assert [v.text for v in api.history(CHAT, card.message_id)] == ["draft #1", edited.text]
    assert api.callback_answers() == [
        {
            "callback_query_id": query_id,
            "text": "done: a:1",
            "show_alert": False,
            "url": None,
            "cache_time": 0,
        }
    ]


async def test_retry_after_is_honoured_by_ptb(
    api: localapi.LocalBotApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PTB 22 warns on every RetryAfter unless its timedelta mode is opted into.
    monkeypatch.setenv("PTB_TIMEDELTA", "1")
    app = build_app(api, retries=2)
    api.fail_next("sendMessage", status=429, retry_after=1)
    async with app:
        message = await app.bot.send_message(CHAT, "after the flood")
    assert [c.status for c in api.calls("sendMessage")] == [429, 200]
    assert [m.text for m in api.sent(CHAT)] == ["after the flood"]
    assert message.message_id == api.sent(CHAT)[0].message_id


async def test_429_body_matches_telegram(api: localapi.LocalBotApi) -> None:
    api.fail_next("getMe", retry_after=7)
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{api.base_url}{TOKEN}/getMe")
    assert response.status_code == 429
    assert response.json() == {
        "ok": False,
        "error_code": 429,
        "description": "Too Many Requests: retry after 7",
        "parameters": {"retry_after": 7},
    }


async def test_unchanged_edit_is_not_modified(api: localapi.LocalBotApi) -> None:
    async with build_app(api) as app:
        card = await app.bot.send_message(
            CHAT, "<b>same</b>", parse_mode="HTML", reply_markup=KEYBOARD
        )
        with pytest.raises(tg_error.BadRequest, match="Message is not modified"):
            await app.bot.edit_message_text(
                "<b>same</b>", CHAT, card.message_id, parse_mode="HTML", reply_markup=KEYBOARD
            )
        with pytest.raises(tg_error.BadRequest, match="Message to edit not found"):
            await app.bot.edit_message_text("x", CHAT, 999)
        await app.bot.edit_message_reply_markup(CHAT, card.message_id, reply_markup=None)
        with pytest.raises(tg_error.BadRequest, match="Message is not modified"):
            await app.bot.edit_message_reply_markup(CHAT, card.message_id, reply_markup=None)
    assert [v.version for v in api.history(CHAT, card.message_id)] == [1, 2]


async def test_send_message_checks_like_telegram(api: localapi.LocalBotApi) -> None:
    async with build_app(api) as app:
        with pytest.raises(tg_error.BadRequest, match="Message is too long"):
            await app.bot.send_message(CHAT, "x" * 4097)
        with pytest.raises(tg_error.BadRequest, match="Message text is empty"):
            await app.bot.send_message(CHAT, "  ")
        with pytest.raises(tg_error.BadRequest, match='unsupported start tag "br"'):
            await app.bot.send_message(CHAT, "a<br>b", parse_mode="HTML")
        with pytest.raises(tg_error.BadRequest, match="Button_data_invalid"):
            await app.bot.send_message(
                CHAT,
                "x",
                reply_markup=InlineKeyboardMarkup(
                    [[InlineKeyboardButton("x", callback_data="d" * 65)]]
                ),
            )
        with pytest.raises(tg_error.BadRequest, match="Message to be replied not found"):
            await app.bot.send_message(CHAT, "x", reply_to_message_id=77)
        html = await app.bot.send_message(
            CHAT,
            "<b>4096</b> &amp; <a href='https://example.org'>ok</a>" + "y" * 4087,
            parse_mode="HTML",
        )
        prompt = await app.bot.send_message(
            CHAT, "reason?", reply_markup=ForceReply(), reply_to_message_id=html.message_id
        )
    assert html.text.startswith("4096 & ok") and len(html.text) == 4096
    assert [(e.type, e.offset, e.length) for e in html.entities] == [
        ("bold", 0, 4),
        ("text_link", 7, 2),
    ]
    assert (
        prompt.reply_to_message is not None
        and prompt.reply_to_message.message_id == html.message_id
    )
    assert prompt.reply_markup is None  # force_reply is not echoed on the Message ...
    assert api.sent(CHAT)[-1].reply_markup == {"force_reply": True}  # ... but the store keeps it


async def test_faults_5xx_and_slow(api: localapi.LocalBotApi) -> None:
    async with build_app(api) as app:
        api.fail_next("sendMessage", status=502)
        with pytest.raises(tg_error.NetworkError, match="Bad Gateway"):
            await app.bot.send_message(CHAT, "x")
        api.slow_next("sendMessage", 5)
        with pytest.raises(tg_error.TimedOut):
            await app.bot.send_message(CHAT, "late", read_timeout=0.2)
        await app.bot.send_message(CHAT, "on time")
    # The slow call is still running on the server (Telegram, too, may deliver a timed-out send).
    assert [(c.status, c.params["text"]) for c in api.calls("sendMessage")][:2] == [
        (502, "x"),
        (200, "on time"),
    ]


async def test_tokens_methods_and_commands(api: localapi.LocalBotApi) -> None:
    async with httpx.AsyncClient() as client:
        wrong = await client.post(f"{api.base_url}999:other/getMe")
        unknown = await client.post(f"{api.base_url}{TOKEN}/sendTelepathy")
    assert (wrong.status_code, wrong.json()["description"]) == (401, "Unauthorized")
    assert unknown.status_code == 404
    assert unknown.json() == {
        "ok": False,
        "error_code": 404,
        "description": "Not Found: method not found",
    }
    async with build_app(api) as app:
        await app.bot.set_my_commands([("status", "pipeline status"), ("budget", "spend")])
        assert [c.command for c in await app.bot.get_my_commands()] == ["status", "budget"]
        await app.bot.set_webhook("https://127.0.0.1:8443/hook", secret_token="s3cret")
        assert (await app.bot.get_webhook_info()).url == "https://127.0.0.1:8443/hook"
        with pytest.raises(tg_error.Conflict):
            await app.bot.get_updates(timeout=0)
        await app.bot.delete_webhook()
        await app.bot.send_chat_action(CHAT, "typing")
        sent = await app.bot.send_message(CHAT, "bye")
        assert await app.bot.delete_message(CHAT, sent.message_id)
    assert api.sent(CHAT) == [] and api.history(CHAT, sent.message_id)[-1].deleted
    assert api.state.chat_actions == [{"chat_id": CHAT, "action": "typing"}]
    assert all("s3cret" not in str(c.params) for c in api.calls())


async def test_get_updates_long_poll_offset_and_limit(api: localapi.LocalBotApi) -> None:
    url = f"{api.base_url}{TOKEN}/getUpdates"
    async with httpx.AsyncClient(timeout=40) as client:
        poll = asyncio.create_task(client.post(url, data={"timeout": "30"}))
        await asyncio.sleep(0.05)
        first = api.inject_message(CHAT, USER, "one")
        # A 30 s long poll returns as soon as the update is queued.
        got = (await asyncio.wait_for(poll, 10)).json()["result"]
        assert [u["update_id"] for u in got] == [first["update_id"]]
        api.inject_message(CHAT, USER, "two", reply_to_message_id=first["message"]["message_id"])
        api.inject_message(CHAT, USER, "three")
        limited = (
            await client.post(url, json={"offset": first["update_id"] + 1, "limit": 1})
        ).json()["result"]
        rest = (
            await client.post(url, json={"offset": limited[0]["update_id"] + 1, "timeout": 0})
        ).json()["result"]
    assert limited[0]["message"]["text"] == "two"
    assert limited[0]["message"]["reply_to_message"]["text"] == "one"
    assert [u["message"]["text"] for u in rest] == ["three"]
    assert api.state.pending_update_count() == 1  # "three" stays until a higher offset confirms it


async def test_http_control_api_drives_a_polling_bot(api: localapi.LocalBotApi) -> None:
    app = build_app(api)
    app.add_handler(CommandHandler("start", start))
    async with polling(app), httpx.AsyncClient(base_url=api.control_url, timeout=10) as client:
        revision = (await client.get("/info")).json()["result"]["revision"]
        injected = await client.post(
            "/inject_command", json={"chat_id": CHAT, "user_id": USER, "text": "/start web"}
        )
        assert (
            injected.status_code == 200
            and injected.json()["result"]["message"]["text"] == "/start web"
        )
        sent: list[dict[str, Any]] = []
        while not sent:
            revision = (await client.get("/wait", params={"after": revision, "timeout": 5})).json()[
                "result"
            ]
            sent = (await client.get("/sent", params={"chat_id": CHAT})).json()["result"]
        tap = await client.post(
            "/inject_callback",
            json={
                "chat_id": CHAT,
                "user_id": USER,
                "message_id": sent[0]["message_id"],
                "data": "a:1",
            },
        )
        bad = await client.post(
            "/inject_message", json={"chat_id": "forty-two", "from_user_id": USER, "text": "x"}
        )
        missing = await client.post(
            "/inject_callback",
            json={"chat_id": CHAT, "user_id": USER, "message_id": 99, "data": "a"},
        )
        chat = (await client.get("/messages", params={"chat_id": CHAT})).json()["result"]
        await client.post("/fail_next", json={"method": "getMe", "status": 500})
        calls = (await client.get("/calls", params={"method": "getMe"})).json()["result"]
    assert sent[0]["text"] == "hello web" and sent[0]["reply_markup"] == KEYBOARD.to_dict()
    assert tap.status_code == 200 and tap.json()["result"].isdigit()
    assert bad.status_code == 400 and "'chat_id' must be an integer" in bad.json()["description"]
    assert missing.status_code == 400 and "has no message 99" in missing.json()["description"]
    assert [m["text"] for m in chat] == ["/start web", "hello web"]
    assert [c["status"] for c in calls] == [200]
    assert "s3cret" not in str(calls)


async def test_logs_never_show_the_token(
    api: localapi.LocalBotApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="bot.demo.botapi.localapi")
    async with build_app(api) as app:
        await app.bot.get_me()
    assert any("/bot<redacted>/getMe" in r.getMessage() for r in caplog.records)
    assert all(TOKEN not in r.getMessage() for r in caplog.records)


async def test_a_burst_of_sends_gets_consecutive_ids(api: localapi.LocalBotApi) -> None:
    async with build_app(api) as app:
        sent = await asyncio.gather(*(app.bot.send_message(CHAT, f"n{i}") for i in range(40)))
    assert sorted(m.message_id for m in sent) == list(range(1, 41))
    assert {m.text for m in api.sent(CHAT)} == {f"n{i}" for i in range(40)}


async def test_a_second_poller_ends_the_first_with_conflict(api: localapi.LocalBotApi) -> None:
    url = f"{api.base_url}{TOKEN}/getUpdates"
    async with httpx.AsyncClient(timeout=40) as one, httpx.AsyncClient(timeout=40) as two:
        first = asyncio.create_task(one.post(url, data={"timeout": "30"}))
        await api.await_for(lambda: api.state.poll_generation == 1)  # the first is waiting
        second = asyncio.create_task(two.post(url, data={"timeout": "30"}))
        ended = await asyncio.wait_for(first, 10)
        api.inject_message(CHAT, USER, "for the live poller")
        live = await asyncio.wait_for(second, 10)
    assert (
        ended.status_code == 409 and "terminated by other getUpdates" in ended.json()["description"]
    )
    assert [u["message"]["text"] for u in live.json()["result"]] == ["for the live poller"]


async def test_allowed_updates_filter_update_types(api: localapi.LocalBotApi) -> None:
    async with build_app(api) as app:
        card = await app.bot.send_message(CHAT, "card", reply_markup=KEYBOARD)
        api.inject_message(CHAT, USER, "chatter")
        api.inject_callback(CHAT, USER, card.message_id, "a:1")
        updates = await app.bot.get_updates(timeout=0, allowed_updates=["callback_query"])
    assert [u.callback_query.data for u in updates if u.callback_query] == ["a:1"]
    assert len(updates) == 1


async def test_stop_ends_a_pending_long_poll() -> None:
    api = localapi.LocalBotApi().start()
    url = f"{api.base_url}{TOKEN}/getUpdates"
    async with httpx.AsyncClient(timeout=40) as client:
        poll = asyncio.create_task(client.post(url, data={"timeout": "30"}))
        await asyncio.sleep(0.1)
        await asyncio.to_thread(api.stop)
        response = await asyncio.wait_for(poll, 10)
    assert response.json() == {"ok": True, "result": []}
    with pytest.raises(RuntimeError, match="not running"):
        _ = api.port


def test_html_parse_mode_entities_count_utf16() -> None:
    text, entities = localapi_html.parse(
        '😀 <i>é</i> <pre><code class="language-python">x &lt; 1</code></pre>'
        '<span class="tg-spoiler">s</span><blockquote expandable>q</blockquote>'
    )
    assert text == "😀 é x < 1sq"
    assert entities == [
        {"type": "italic", "offset": 3, "length": 1},
        {"type": "pre", "offset": 5, "length": 5, "language": "python"},
        {"type": "spoiler", "offset": 10, "length": 1},
        {"type": "expandable_blockquote", "offset": 11, "length": 1},
    ]
    for bad, reason in [
        ("<b>open", 'end tag corresponding to start tag "b"'),
        ("<b><i>x</b></i>", 'Unexpected end tag "b"'),
        ("<span>x</span>", "tg-spoiler"),
    ]:
        with pytest.raises(localapi_html.ParseError, match=reason):
            localapi_html.parse(bad)


def test_runs_as_a_module(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.demo.botapi.localapi", "--port", "0"],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        base_url = line.split()[2]
        me = httpx.post(f"{base_url}{TOKEN}/getMe", timeout=10).json()
        assert me["result"]["id"] == 123456 and me["result"]["is_bot"]
    finally:
        process.send_signal(signal.SIGINT)
        try:
            code = process.wait(timeout=10)
        finally:
            if process.poll() is None:
                process.kill()  # never leave it behind for the tests that follow
                process.wait()
            if process.stdout:
                process.stdout.close()
    assert code == 0


async def test_cors_only_for_the_configured_page_origin() -> None:
    origin = "http://127.0.0.1:9000"
    with localapi.LocalBotApi(cors_origin=origin) as api:
        async with httpx.AsyncClient(timeout=10) as client:
            preflight = await client.options(f"{api.control_url}/sent")
            control = await client.get(f"{api.control_url}/sent")
            bot_api = await client.get(f"{api.base_url}{TOKEN}/getMe")
    with localapi.LocalBotApi() as closed:
        async with httpx.AsyncClient(timeout=10) as client:
            refused = await client.options(f"{closed.control_url}/sent")
    assert preflight.status_code == 204
    assert control.headers["access-control-allow-origin"] == origin
    assert "access-control-allow-origin" not in bot_api.headers
    assert refused.status_code == 404 and "access-control-allow-origin" not in refused.headers


def test_update_ids_go_on_across_a_restart() -> None:
    """A bot keeps the update ids it handled; a restarted server must not reuse them."""
    with localapi.LocalBotApi(token=TOKEN) as first:
        seen = [first.inject_message(CHAT, USER, str(n))["update_id"] for n in range(3)]
    time.sleep(0.01)  # ids follow the clock in milliseconds: more than 3 have passed
    with localapi.LocalBotApi(token=TOKEN) as second:
        again = second.inject_message(CHAT, USER, "after the restart")["update_id"]
    assert again > max(seen)
