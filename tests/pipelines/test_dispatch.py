"""Dispatch: the contract, and each kind against a real local server or real files."""

from __future__ import annotations

import email
import email.policy
import hashlib
import html
import random
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pydantic
import pytest
import telegram
import telegram.request

from bot.demo.botapi import localapi
from pipelines import dispatch
from pipelines.dispatch import file as dispatch_file
from pipelines.dispatch import smtp as dispatch_smtp
from pipelines.dispatch import telegram as dispatch_telegram
from tests.fakes import smtp_server
from tests.fakes.smtp_server import EphemeralController, Recorder
from tests.fakes.webhook_server import Reply, WebhookServer

TARGETS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(dispatch.DispatchTarget)


def make_delivery(attempt: int = 1, version: int = 2, **source: Any) -> dispatch.Delivery:
    return dispatch.Delivery.build(
        item_id=42,
        pipeline="news",
        version=version,
        attempt=attempt,
        text="Approved <b>text</b> & more",
        title="A title",
        link="https://example.org/a",
        source=source,
    )


# --- contract -----------------------------------------------------------------------------


def test_idempotency_key_is_the_sha256_of_the_parts() -> None:
    digest = hashlib.sha256(b"news\x0042\x001\x002").hexdigest()
    assert dispatch.idempotency_key("news", 42, 1, 2) == "gh-" + digest
    assert make_delivery().idempotency_key == "gh-" + digest


def test_idempotency_key_changes_with_every_part() -> None:
    keys = {
        dispatch.idempotency_key("news", 42, 1, 2),
        dispatch.idempotency_key("news", 42, 2, 2),
        dispatch.idempotency_key("news", 42, 1, 3),
        dispatch.idempotency_key("news", 43, 1, 2),
        dispatch.idempotency_key("digest", 42, 1, 2),
    }
    assert len(keys) == 5


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "a\x00b", "sp ace"])
def test_unsafe_pipeline_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="pipeline name"):
        dispatch.idempotency_key(name, 1, 1, 1)


def test_retry_delay_grows_is_capped_and_jittered() -> None:
    rng = random.Random(7)
    delays = [dispatch.retry_delay(n, rng) for n in range(1, 20)]
    for n, delay in enumerate(delays, start=1):
        ceiling = min(dispatch.RETRY_CAP_SECONDS, dispatch.RETRY_BASE_SECONDS * 2 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling
    assert max(delays) <= dispatch.RETRY_CAP_SECONDS
    assert delays[-1] > delays[0]
    again = random.Random(7)
    assert delays == [dispatch.retry_delay(n, again) for n in range(1, 20)]
    with pytest.raises(ValueError, match="attempt must be 1 or more"):
        dispatch.retry_delay(0, rng)


def test_target_models_parse_by_type() -> None:
    assert isinstance(
        TARGETS.validate_python({"type": "webhook", "url": "https://h.example/x"}),
        dispatch.WebhookTarget,
    )
    assert isinstance(TARGETS.validate_python({"type": "file", "path": "/x"}), dispatch.FileTarget)
    smtp = TARGETS.validate_python({"type": "smtp", "host": "mx", "from_addr": "b@example.org"})
    assert isinstance(smtp, dispatch.SmtpTarget) and smtp.starttls and smtp.port == 587
    channel = TARGETS.validate_python({"type": "telegram_channel", "chat_id": -1001234})
    assert isinstance(channel, dispatch.TelegramChannelTarget)
    assert isinstance(TARGETS.validate_python({"type": "none"}), dispatch.NoneTarget)


@pytest.mark.parametrize(
    ("config", "complaint"),
    [
        ({"type": "fax"}, "webhook"),
        ({"type": "webhook", "url": "ftp://h/x"}, "http:// or https://"),
        ({"type": "webhook", "url": "https://h/", "headers": {"idempotency-key": "x"}}, "set by"),
        ({"type": "webhook", "url": "https://h/", "headers": {"X": "env:1BAD"}}, "variable name"),
        ({"type": "webhook", "url": "https://h/", "timeout": 0}, "greater than 0"),
        ({"type": "smtp", "host": "mx", "from_addr": "nobody"}, "e-mail address"),
        ({"type": "smtp", "host": "mx", "from_addr": "a@b", "username": "u"}, "go together"),
        ({"type": "telegram_channel", "chat_id": "channel"}, "@mychannel"),
        ({"type": "none", "extra": 1}, "Extra inputs"),
    ],
)
def test_bad_target_config_says_what_is_wrong(config: dict[str, Any], complaint: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=complaint):
        TARGETS.validate_python(config)


async def test_none_target_is_ok_without_sending(client: httpx.AsyncClient) -> None:
    result = await dispatch.dispatch(
        dispatch.NoneTarget(type="none"), make_delivery(), client=client
    )
    assert result == dispatch.DispatchResult(external_id=None, detail="no dispatch target")


# --- webhook ------------------------------------------------------------------------------


@pytest.fixture
def hook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


def webhook(url: str, **extra: Any) -> dispatch.WebhookTarget:
    return dispatch.WebhookTarget(type="webhook", url=url, **extra)


async def test_webhook_posts_json_with_the_idempotency_key(
    hook: WebhookServer, client: httpx.AsyncClient
) -> None:
    target = webhook(hook.url, headers={"Authorization": "env:HOOK_TOKEN", "X-Team": "ops"})
    env = {"HOOK_TOKEN": "Bearer s3cret-value"}
    hook.script(Reply(201, b'{"id": 991}'))
    result = await dispatch.dispatch(target, make_delivery(), client=client, env=env)
    assert result.external_id == "991"
    (request,) = hook.requests
    assert request.headers["idempotency-key"] == dispatch.idempotency_key("news", 42, 1, 2)
    assert request.headers["authorization"] == "Bearer s3cret-value"
    assert request.headers["x-team"] == "ops"
    assert request.json() == {
        "item_id": 42,
        "pipeline": "news",
        "version": 2,
        "attempt": 1,
        "title": "A title",
        "link": "https://example.org/a",
        "image_url": None,
        "text": "Approved <b>text</b> & more",
    }


async def test_webhook_retry_resends_the_key_and_a_replay_sends_a_new_one(
    hook: WebhookServer, client: httpx.AsyncClient
) -> None:
    target = webhook(hook.url)
    for delivery in (make_delivery(), make_delivery(), make_delivery(attempt=2)):
        await dispatch.dispatch(target, delivery, client=client)
    first, retry, replay = (r.headers["idempotency-key"] for r in hook.requests)
    assert first == retry
    assert replay != first
    assert replay == dispatch.idempotency_key("news", 42, 2, 2)


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply(500, b"boom"), dispatch.TransientDispatchError),
        (Reply(503), dispatch.TransientDispatchError),
        (Reply(408), dispatch.TransientDispatchError),
        (Reply(409), dispatch.TransientDispatchError),
        (Reply(400, b"missing field"), dispatch.PermanentDispatchError),
        (Reply(404), dispatch.PermanentDispatchError),
        (Reply(302, headers={"Location": "/elsewhere"}), dispatch.PermanentDispatchError),
    ],
)
async def test_webhook_status_maps_to_transient_or_permanent(
    hook: WebhookServer, client: httpx.AsyncClient, reply: Reply, error: type[Exception]
) -> None:
    hook.script(reply)
    with pytest.raises(error, match=f"answered {reply.status}"):
        await dispatch.dispatch(webhook(hook.url), make_delivery(), client=client)


async def test_webhook_429_passes_retry_after_on(
    hook: WebhookServer, client: httpx.AsyncClient
) -> None:
    hook.script(Reply(429, headers={"Retry-After": "7"}))
    with pytest.raises(dispatch.TransientDispatchError) as caught:
        await dispatch.dispatch(webhook(hook.url), make_delivery(), client=client)
    assert caught.value.retry_after == 7.0


async def test_webhook_timeout_is_transient(hook: WebhookServer, client: httpx.AsyncClient) -> None:
    hook.script(Reply(200, delay=5.0))
    with pytest.raises(dispatch.TransientDispatchError, match=r"no answer within 0\.2 s"):
        await dispatch.dispatch(webhook(hook.url, timeout=0.2), make_delivery(), client=client)


async def test_webhook_connection_refused_is_transient(client: httpx.AsyncClient) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(dispatch.TransientDispatchError, match="ConnectError"):
        await dispatch.dispatch(
            webhook(f"http://127.0.0.1:{port}/x"), make_delivery(), client=client
        )


async def test_webhook_errors_hold_no_secret(
    hook: WebhookServer, client: httpx.AsyncClient
) -> None:
    # Slack-style URLs carry the token in the path; a server may echo a header back.
    target = webhook(hook.url + "/T0KEN-IN-PATH", headers={"X-Key": "env:HOOK_KEY"})
    hook.script(Reply(401, b"bad key hunter2-secret"))
    with pytest.raises(dispatch.PermanentDispatchError) as caught:
        await dispatch.dispatch(
            target, make_delivery(), client=client, env={"HOOK_KEY": "hunter2-secret"}
        )
    message = str(caught.value)
    assert "answered 401" in message and "127.0.0.1" in message
    assert "hunter2" not in message and "T0KEN" not in message


async def test_webhook_missing_env_header_is_permanent(
    hook: WebhookServer, client: httpx.AsyncClient
) -> None:
    target = webhook(hook.url, headers={"Authorization": "env:NOT_SET_ANYWHERE"})
    with pytest.raises(dispatch.PermanentDispatchError, match="NOT_SET_ANYWHERE is not set"):
        await dispatch.dispatch(target, make_delivery(), client=client, env={})
    assert hook.requests == []


# --- file ---------------------------------------------------------------------------------


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


async def test_file_is_written_atomically_with_front_matter(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    target = dispatch.FileTarget(type="file", path=tmp_path / "out")
    result = await dispatch.dispatch(target, make_delivery(), client=client)
    path = tmp_path / "out" / "news-42-v2.md"
    assert result.external_id == str(path)
    assert names(path.parent) == ["news-42-v2.md"]  # no temp file left
    content = path.read_text()
    assert content.endswith("\n\nApproved <b>text</b> & more\n")
    assert dispatch_file.read_front_matter(path) == {
        "item": 42,
        "pipeline": "news",
        "version": 2,
        "attempt": 1,
        "idempotency_key": dispatch.idempotency_key("news", 42, 1, 2),
        "title": "A title",
        "link": "https://example.org/a",
    }


async def test_file_same_key_twice_is_one_identical_file(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    target = dispatch.FileTarget(type="file", path=tmp_path)
    await dispatch.dispatch(target, make_delivery(), client=client)
    first = (tmp_path / "news-42-v2.md").read_bytes()
    await dispatch.dispatch(target, make_delivery(), client=client)
    assert names(tmp_path) == ["news-42-v2.md"]
    assert (tmp_path / "news-42-v2.md").read_bytes() == first


async def test_file_into_a_path_that_is_a_file_is_permanent(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    (tmp_path / "plain").write_text("not a folder")
    target = dispatch.FileTarget(type="file", path=tmp_path / "plain")
    with pytest.raises(dispatch.PermanentDispatchError, match="could not write"):
        await dispatch.dispatch(target, make_delivery(), client=client)


async def test_reconcile_finds_orphans_and_ghosts(
    tmp_path: Path, client: httpx.AsyncClient
) -> None:
    target = dispatch.FileTarget(type="file", path=tmp_path)
    await dispatch.dispatch(target, make_delivery(version=1), client=client)  # expected
    await dispatch.dispatch(target, make_delivery(version=3), client=client)  # orphan
    (tmp_path / "notes.md").write_text("hand-written, no front matter\n")
    (tmp_path / ".news-9-v1.md.x1.tmp").write_text("a crash's leftover")
    expected = {"news-42-v1.md": 42, "news-7-v1.md": 7}

    found = dispatch_file.reconcile_files(tmp_path, expected)

    assert found.ghosts == ("news-7-v1.md",)
    assert found.orphans == (
        dispatch_file.OrphanFile(
            "news-42-v3.md", 42, "news", 3, dispatch.idempotency_key("news", 42, 1, 3)
        ),
        dispatch_file.OrphanFile("notes.md", None, None, None, None),
    )


def test_reconcile_of_a_missing_folder_has_only_ghosts(tmp_path: Path) -> None:
    found = dispatch_file.reconcile_files(tmp_path / "absent", {"news-1-v1.md": 1})
    assert found == dispatch_file.Reconciliation(orphans=(), ghosts=("news-1-v1.md",))


# --- smtp ---------------------------------------------------------------------------------


@pytest.fixture
def mail_server() -> Iterator[tuple[Recorder, EphemeralController]]:
    with smtp_server.running() as running:
        yield running


def smtp_target(controller: Any, **extra: Any) -> dispatch.SmtpTarget:
    return dispatch.SmtpTarget(
        type="smtp",
        host="127.0.0.1",
        port=controller.port,
        from_addr="Gatehouse <bot@example.org>",
        starttls=False,
        **extra,
    )


def email_delivery(attempt: int = 1, **source: Any) -> dispatch.Delivery:
    original = {
        "from": "Alice <alice@example.org>",
        "to": "bot@example.org",
        "subject": "Question about invoices",
        "message_id": "<orig-1@example.org>",
        "references": "<root@example.org> <mid@example.org>",
    }
    return make_delivery(attempt=attempt, **(original | source))


async def test_smtp_sends_a_threaded_reply(
    mail_server: tuple[Recorder, Any], client: httpx.AsyncClient
) -> None:
    recorder, controller = mail_server
    delivery = email_delivery()
    result = await dispatch.dispatch(smtp_target(controller), delivery, client=client)

    (envelope,) = recorder.envelopes
    assert envelope.mail_from == "bot@example.org"
    assert envelope.rcpt_tos == ["alice@example.org"]
    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert message["To"] == "Alice <alice@example.org>"
    assert message["Subject"] == "Re: Question about invoices"
    assert message["In-Reply-To"] == "<orig-1@example.org>"
    assert message["References"] == ("<root@example.org> <mid@example.org> <orig-1@example.org>")
    assert message["Message-ID"] == f"<{delivery.idempotency_key}@gatehouse>"
    assert result.external_id == message["Message-ID"]
    assert message.get_content().rstrip() == "Approved <b>text</b> & more"


async def test_smtp_replies_to_reply_to_when_the_sender_set_one(
    mail_server: tuple[Recorder, Any], client: httpx.AsyncClient
) -> None:
    recorder, controller = mail_server
    delivery = email_delivery(reply_to="Help desk <help@example.org>", subject="")
    await dispatch.dispatch(smtp_target(controller), delivery, client=client)
    (envelope,) = recorder.envelopes
    assert envelope.rcpt_tos == ["help@example.org"]
    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert message["Subject"] == "Re: A title"  # no subject: the item's title stands in


async def test_smtp_resend_keeps_the_message_id_and_a_replay_changes_it(
    mail_server: tuple[Recorder, Any], client: httpx.AsyncClient
) -> None:
    recorder, controller = mail_server
    target = smtp_target(controller)
    for delivery in (email_delivery(), email_delivery(), email_delivery(attempt=2)):
        await dispatch.dispatch(target, delivery, client=client)
    first, resend, replay = (
        email.message_from_bytes(e.content, policy=email.policy.default)["Message-ID"]
        for e in recorder.envelopes
    )
    assert first == resend
    assert replay != first


async def test_smtp_logs_in_with_the_password_from_the_environment(
    mail_server: tuple[Recorder, Any], client: httpx.AsyncClient
) -> None:
    recorder, controller = mail_server
    target = smtp_target(controller, username="bot", password_env="SMTP_PASS")
    await dispatch.dispatch(target, email_delivery(), client=client, env={"SMTP_PASS": "pa55"})
    assert len(recorder.envelopes) == 1
    with pytest.raises(dispatch.PermanentDispatchError, match="535") as caught:
        await dispatch.dispatch(
            target, email_delivery(), client=client, env={"SMTP_PASS": "wrong-pa55"}
        )
    assert "wrong-pa55" not in str(caught.value)
    with pytest.raises(dispatch.PermanentDispatchError, match="SMTP_PASS is not set"):
        await dispatch.dispatch(target, email_delivery(), client=client, env={})


@pytest.mark.parametrize(
    ("refusal", "error"),
    [
        ("451 4.3.0 Try again later", dispatch.TransientDispatchError),
        ("550 5.1.1 No such user", dispatch.PermanentDispatchError),
    ],
)
async def test_smtp_4xx_is_transient_and_5xx_permanent(
    mail_server: tuple[Recorder, Any],
    client: httpx.AsyncClient,
    refusal: str,
    error: type[Exception],
) -> None:
    recorder, controller = mail_server
    recorder.refuse = refusal
    with pytest.raises(error, match=refusal[:3]):
        await dispatch.dispatch(smtp_target(controller), email_delivery(), client=client)
    assert recorder.envelopes == []


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("Hello", "Re: Hello"),
        ("Re: Hello", "Re: Hello"),
        ("RE:  Hello\r\n there", "RE: Hello there"),
        ("re:Hello", "re:Hello"),
        ("Regarding X", "Re: Regarding X"),
    ],
)
def test_reply_subject_never_doubles_re(subject: str, expected: str) -> None:
    assert dispatch_smtp.reply_subject(subject) == expected


async def test_smtp_without_a_sender_to_reply_to_is_permanent(
    mail_server: tuple[Recorder, Any], client: httpx.AsyncClient
) -> None:
    _, controller = mail_server
    delivery = make_delivery(subject="Hi")
    with pytest.raises(dispatch.PermanentDispatchError, match="no sender address"):
        await dispatch.dispatch(smtp_target(controller), delivery, client=client)


async def test_smtp_header_injection_is_refused(
    mail_server: tuple[Recorder, Any], client: httpx.AsyncClient
) -> None:
    recorder, controller = mail_server
    delivery = email_delivery(message_id="<a@b>\r\nBcc: victim@example.org")
    with pytest.raises(dispatch.PermanentDispatchError, match="cannot become a reply"):
        await dispatch.dispatch(smtp_target(controller), delivery, client=client)
    assert recorder.envelopes == []


async def test_smtp_server_down_is_transient(client: httpx.AsyncClient) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    target = dispatch.SmtpTarget(
        type="smtp", host="127.0.0.1", port=port, from_addr="bot@example.org", starttls=False
    )
    with pytest.raises(dispatch.TransientDispatchError, match=f"127.0.0.1:{port}"):
        await dispatch.dispatch(target, email_delivery(), client=client)


# --- telegram_channel (against the local Bot API server) -----------------------------------

TOKEN = "123456:" + "S" * 35
CHANNEL = -1001234567


@pytest.fixture
async def bot_api() -> AsyncIterator[tuple[localapi.LocalBotApi, telegram.Bot]]:
    with localapi.LocalBotApi() as api:
        request = telegram.request.HTTPXRequest(read_timeout=1.0)
        async with telegram.Bot(TOKEN, base_url=api.base_url, request=request) as bot:
            yield api, bot


def channel() -> dispatch.TelegramChannelTarget:
    return dispatch.TelegramChannelTarget(type="telegram_channel", chat_id=CHANNEL)


async def test_telegram_posts_escaped_text_to_the_channel(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot], client: httpx.AsyncClient
) -> None:
    api, bot = bot_api
    result = await dispatch.dispatch(channel(), make_delivery(), client=client, bot=bot)
    (posted,) = api.sent(CHANNEL)
    # Escaped, the draft's "<b>" arrives as text rather than as bold markup.
    assert posted.text == "Approved <b>text</b> & more"
    assert posted.entities == []
    assert result.external_id == str(posted.message_id)


async def test_telegram_splits_long_text_into_messages_that_fit(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot], client: httpx.AsyncClient
) -> None:
    api, bot = bot_api
    text = "".join(f"line {n} <&> " + "x" * 50 + "\n" for n in range(300))
    delivery = dispatch.Delivery.build(
        item_id=1, pipeline="news", version=1, attempt=1, text=text, title="long"
    )
    await dispatch.dispatch(channel(), delivery, client=client, bot=bot)
    posted = api.sent(CHANNEL)
    assert len(posted) > 1
    assert_cut_from([m.text for m in posted], text)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, dispatch.PermanentDispatchError),
        (403, dispatch.PermanentDispatchError),
        (502, dispatch.TransientDispatchError),
    ],
)
async def test_telegram_errors_map_to_transient_or_permanent(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot],
    client: httpx.AsyncClient,
    status: int,
    error: type[Exception],
) -> None:
    api, bot = bot_api
    api.fail_next("sendMessage", status=status)
    with pytest.raises(error, match=f"telegram chat {CHANNEL}") as caught:
        await dispatch.dispatch(channel(), make_delivery(), client=client, bot=bot)
    assert TOKEN not in str(caught.value) and TOKEN.split(":")[1] not in str(caught.value)
    assert api.sent(CHANNEL) == []


async def test_telegram_flood_control_is_transient_with_retry_after(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot],
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "1")  # else PTB warns on every RetryAfter
    api, bot = bot_api
    api.fail_next("sendMessage", status=429, retry_after=3)
    with pytest.raises(dispatch.TransientDispatchError, match="RetryAfter") as caught:
        await dispatch.dispatch(channel(), make_delivery(), client=client, bot=bot)
    assert caught.value.retry_after == 3.0


async def test_telegram_timeout_is_transient(
    bot_api: tuple[localapi.LocalBotApi, telegram.Bot], client: httpx.AsyncClient
) -> None:
    api, bot = bot_api
    api.slow_next("sendMessage", 3.0)
    with pytest.raises(dispatch.TransientDispatchError, match="TimedOut"):
        await dispatch.dispatch(channel(), make_delivery(), client=client, bot=bot)


async def test_telegram_without_a_bot_is_permanent(client: httpx.AsyncClient) -> None:
    with pytest.raises(dispatch.PermanentDispatchError, match="no bot was passed"):
        await dispatch.dispatch(channel(), make_delivery(), client=client)


@pytest.mark.parametrize("limit", [8, 50, 4096])
def test_split_html_never_exceeds_the_limit_nor_cuts_an_escape(limit: int) -> None:
    text = "short line & <tag>\n" + "&" * 9000 + "\n" + "word " * 2000
    parts = dispatch_telegram.split_html(text, limit)
    assert all(0 < len(part) <= limit for part in parts)
    assert_cut_from([html.unescape(part) for part in parts], text)


def assert_cut_from(parts: list[str], text: str) -> None:
    """`parts` are `text` in order, losing only whitespace where a message ends or starts."""
    position = 0
    for part in parts:
        found = text.index(part.strip(), position)
        assert text[position:found].strip() == "", f"text lost before {part[:20]!r}"
        position = found + len(part.strip())
    assert text[position:].strip() == ""
