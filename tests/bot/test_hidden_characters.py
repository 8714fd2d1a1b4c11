"""Bidi controls, zero-width and control characters in a model's or a feed's text show as
marks wherever an operator reads it (cards, the CLI), so no line reads other than it is;
an emoji's joiner and a Persian non-joiner stay."""

from __future__ import annotations

import argparse

import pytest

from bot.chat import card_text
from bot.cli import output

HIDDEN = [
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
    "\u200e", "\u200f", "\u061c", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\x1b",
]  # fmt: skip


def _card(text: str, title: str = "") -> str:
    payload = {"pipeline": "news", "title": title, "text": text, "version": 1, "attempt": 1}
    return card_text.card(7, payload)


@pytest.mark.parametrize("char", HIDDEN)
def test_a_card_marks_each_hidden_character_of_a_draft(char: str) -> None:
    shown = _card(f"Approve {char}this{char} now")
    assert f"Approve [U+{ord(char):04X}]this[U+{ord(char):04X}] now" in shown
    assert char not in shown


def test_an_override_cannot_reorder_a_card_line() -> None:
    # Shown raw, U+202E makes "pay 100 EUR" read as "pay RUE 001".
    shown = _card("pay \u202e100 EUR\u202c to the account")
    assert "pay [U+202E]100 EUR[U+202C] to the account" in shown


def test_an_emoji_joiner_and_a_persian_non_joiner_are_spelling_and_stay() -> None:
    text = "👩\u200d💻 team · 🏳\ufe0f\u200d🌈 · \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    assert text in _card(text)


def test_the_cli_prints_hidden_characters_as_marks(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(json=False)
    output.emit(args, None, lambda: "draft: pay \u202e100 EUR\x1b[2J")
    assert capsys.readouterr().out == "draft: pay [U+202E]100 EUR[U+001B][2J\n"


def test_cli_json_escapes_them_itself(capsys: pytest.CaptureFixture[str]) -> None:
    output.emit(argparse.Namespace(json=True), {"text": "a\u202eb"}, lambda: "")
    assert "\\u202e" in capsys.readouterr().out
