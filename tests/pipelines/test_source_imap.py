"""The imap source against a real Dovecot server over a real socket."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pydantic
import pytest

from pipelines.sources import base, imap
from tests.fakes import dovecot, real

PLAIN = (
    b"From: Ada <ada@example.org>\r\n"
    b"To: agent@example.org\r\n"
    b"Subject: Printer on fire\r\n"
    b"Date: Tue, 02 Jan 2024 10:00:00 +0100\r\n"
    b"Message-ID: <first@example.org>\r\n"
    b"References: <root@example.org>\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"\r\n"
    b"The printer on floor 2 is on fire.\r\n"
)

MULTIPART = (
    b"From: Bob <bob@example.org>\r\n"
    b"To: agent@example.org\r\n"
    b"Subject: =?utf-8?q?Caf=C3=A9_order?=\r\n"
    b"Message-ID: <second@example.org>\r\n"
    b"MIME-Version: 1.0\r\n"
    b'Content-Type: multipart/alternative; boundary="XX"\r\n'
    b"\r\n"
    b"--XX\r\n"
    b"Content-Type: text/html; charset=utf-8\r\n"
    b"\r\n"
    b"<p>Two <b>espressos</b></p>\r\n"
    b"--XX--\r\n"
)

NO_ID = b"From: c@example.org\r\nSubject: no id\r\n\r\nbody\r\n"


@pytest.fixture
def server() -> Iterator[dovecot.Dovecot]:
    real.require(dovecot.skip_reason())
    with dovecot.running() as running:
        yield running


def config_for(server: dovecot.Dovecot, **fields: Any) -> imap.Config:
    values = {
        "type": "imap",
        "host": server.host,
        "port": server.port,
        "username": server.user,
        "password": server.password,
        "ssl": False,
        "timeout_seconds": 10,
    } | fields
    return imap.Config.model_validate(values)


@pytest.mark.slow
async def test_unseen_messages_become_items(
    server: dovecot.Dovecot, client: httpx.AsyncClient
) -> None:
    server.deliver(PLAIN)
    server.deliver(MULTIPART)
    config = config_for(server)
    fetched = await imap.fetch(config, {}, client)
    first, second = fetched.items
    assert first.source_id == "<first@example.org>"
    assert first.title == "Printer on fire"
    assert first.text == "The printer on floor 2 is on fire."
    assert first.published == datetime(2024, 1, 2, 9, 0, tzinfo=UTC)
    assert first.extra == {
        "from": "Ada <ada@example.org>",
        "to": "agent@example.org",
        "cc": "",
        "reply_to": "",
        "subject": "Printer on fire",
        "message_id": "<first@example.org>",
        "references": "<root@example.org>",
        "in_reply_to": "",
    }
    assert second.source_id == "<second@example.org>"
    assert second.title == "Café order"
    assert second.text == "Two espressos"

    # PEEK left both unseen; the kept last UID means the next run only sees new mail.
    again = await imap.fetch(config, fetched.state, client)
    assert again.items == []
    server.deliver(NO_ID)
    third = await imap.fetch(config, fetched.state, client)
    [item] = third.items
    assert item.source_id.startswith("sha256:")
    # Without state, UNSEEN still finds all three: nothing was marked read.
    assert len((await imap.fetch(config, {}, client)).items) == 3


@pytest.mark.slow
async def test_max_messages_takes_the_oldest_and_resumes(
    server: dovecot.Dovecot, client: httpx.AsyncClient
) -> None:
    for raw in (PLAIN, MULTIPART, NO_ID):
        server.deliver(raw)
    config = config_for(server, max_messages=2, search="SINCE 36500")
    first = await imap.fetch(config, {}, client)
    assert [i.title for i in first.items] == ["Printer on fire", "Café order"]
    rest = await imap.fetch(config, first.state, client)
    assert [i.title for i in rest.items] == ["no id"]


@pytest.mark.slow
async def test_wrong_password_is_a_source_error_without_the_password(
    server: dovecot.Dovecot, client: httpx.AsyncClient
) -> None:
    config = config_for(server, password="wrong-Pa55word")
    with pytest.raises(base.SourceError) as caught:
        await imap.fetch(config, {}, client)
    message = str(caught.value)
    assert message == f"imap login failed for {server.user}@{server.host}"
    assert "wrong-Pa55word" not in message


@pytest.mark.slow
async def test_password_from_environment(
    server: dovecot.Dovecot, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_IMAP_PASSWORD", server.password)
    server.deliver(PLAIN)
    config = config_for(server, password="env:TEST_IMAP_PASSWORD")
    fetched = await imap.fetch(config, {}, client)
    assert [item.source_id for item in fetched.items] == ["<first@example.org>"]


def plain_config(port: int, **fields: Any) -> imap.Config:
    values = {"type": "imap", "host": "127.0.0.1", "port": port, "username": "u"}
    return imap.Config.model_validate(values | {"password": "p", "ssl": False} | fields)


async def test_unreachable_server_is_a_source_error(client: httpx.AsyncClient) -> None:
    with socket.socket() as probe:  # a port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(base.SourceError, match=f"imap u@127.0.0.1:{port} unreachable"):
        await imap.fetch(plain_config(port), {}, client)


async def test_silent_server_is_a_timeout(client: httpx.AsyncClient) -> None:
    async def never_greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up and closes
        writer.close()

    silent = await asyncio.start_server(never_greet, "127.0.0.1", 0)
    async with silent:
        port = silent.sockets[0].getsockname()[1]
        config = plain_config(port, timeout_seconds=0.3)
        with pytest.raises(base.SourceError, match=r"imap u@127\.0\.0\.1 timed out after 0\.3 s"):
            await imap.fetch(config, {}, client)


def test_search_criteria() -> None:
    now = datetime(2024, 3, 5, 1, 0, tzinfo=UTC)
    assert imap.search_criteria("UNSEEN", now) == ["UNSEEN"]
    assert imap.search_criteria("SINCE 7", now) == ["SINCE", "27-Feb-2024"]
    with pytest.raises(pydantic.ValidationError, match="SINCE <days>"):
        imap.Config.model_validate(
            {"type": "imap", "host": "h", "username": "u", "password": "p", "search": "FROM x"}
        )


@pytest.mark.slow
async def test_a_huge_message_is_read_only_up_to_max_bytes(
    server: dovecot.Dovecot, client: httpx.AsyncClient
) -> None:
    attachment = b"A" * 3_000_000
    huge = PLAIN.replace(b"fire.\r\n", b"fire.\r\n" + attachment + b"\r\n")
    server.deliver(huge)
    server.deliver(MULTIPART)
    config = config_for(server, max_bytes=10_000)
    first, second = (await imap.fetch(config, {}, client)).items
    assert (first.source_id, first.title) == ("<first@example.org>", "Printer on fire")
    assert first.text.startswith("The printer on floor 2 is on fire.")
    assert len(first.text) < 10_000  # what was read, not the 3 MB behind it
    assert (second.title, second.text) == ("Café order", "Two espressos")
