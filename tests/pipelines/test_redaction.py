"""Redaction: every kind of token and secret gatehouse issues or holds, found by its
shape or because it was remembered, in the spellings libraries log it in."""

from __future__ import annotations

import pytest

from pipelines.dispatch import base as dispatch_base
from pipelines.sources import common
from pipelines.text import redaction

TOKEN = "8123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw_x"
TRIGGER = "ghtk_Qx3v9Lr2mN8pT4kW7yZ1aB5cD6eF0gH2iJ3kL4mN5oP"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"GET https://api.example/bot{TOKEN}/getMe",
            "GET https://api.example/bot<redacted>/getMe",
        ),
        ("POST /bot42:short/sendMessage", "POST /bot<redacted>/sendMessage"),
        (f"failed: {TOKEN}.", "failed: <redacted>."),
        ("at 12:30 the run 7:ok ended", "at 12:30 the run 7:ok ended"),
        (f"token {TRIGGER}", "token ghtk_<redacted>"),
        (f"cut: {TRIGGER[:12]}", "cut: ghtk_<redacted>"),
        ("Invalid header value 'Bearer x\\x00'", "Invalid header value <redacted>"),
        ("Invalid header value 'sk-abc\\x7f'", "Invalid header value <redacted>"),
        ("auth: bearer abc.def-123, next", "auth: bearer <redacted>, next"),
        ("Authorization: Basic dXNlcjpwYXNz", "Authorization: Basic <redacted>"),
        (
            "postgresql://gate:s3cr%40t@db:5432/gatehouse",
            "postgresql://gate:<redacted>@db:5432/gatehouse",
        ),
        ("a basic check of https://x.org/feed", "a basic check of https://x.org/feed"),
    ],
)
def test_tokens_and_credentials_are_found_by_their_shape(text: str, expected: str) -> None:
    assert redaction.redact(text) == expected


def test_the_given_secrets_are_redacted_whatever_their_shape() -> None:
    assert redaction.redact("key hunter2 and hunter22", ["hunter2", "hunter22", ""]) == (
        "key <redacted> and <redacted>"
    )


def test_a_remembered_secret_is_redacted_as_written_escaped_and_percent_encoded() -> None:
    secret = "llm'key/with\\odd+chars-91c2"
    redaction.remember(secret, None, "")
    for spelling in (secret, repr(secret), "llm%27key%2Fwith%5Codd%2Bchars-91c2"):
        assert "91c2" not in redaction.redact(f"sent {spelling} on"), spelling


def test_a_value_too_short_to_be_a_secret_is_not_searched_for() -> None:
    redaction.remember("p", "abc", "pw-4")
    assert redaction.redact("http://example.org/abc pw-4") == "http://example.org/abc <redacted>"


def test_secrets_read_from_the_environment_are_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2E_SOURCE_HEADER", "source-header-secret-3e8a")
    monkeypatch.setenv("E2E_SMTP_PASSWORD", "smtp-password-secret-5d2c")
    common.resolve("env:E2E_SOURCE_HEADER", "header Authorization")
    dispatch_base.read_env("E2E_SMTP_PASSWORD", None, needed_for="smtp")
    text = redaction.redact("sent source-header-secret-3e8a and smtp-password-secret-5d2c")
    assert text == "sent <redacted> and <redacted>"
