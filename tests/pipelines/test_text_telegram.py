"""The one Telegram splitter (UTF-16 units, clean boundaries) and the one token redactor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.text import telegram

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # man ZWJ woman ZWJ girl: 8 units
THUMB = "\U0001f44d\U0001f3fd"  # thumbs up with a skin tone: 4 units
FLAG = "\U0001f1fa\U0001f1e6"  # two regional indicators: 4 units


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=12000))
def test_split_keeps_every_part_within_the_limit_and_loses_only_newlines(text: str) -> None:
    parts = telegram.split(text, 1000)
    assert all(telegram.utf16_len(part) <= 1000 for part in parts)
    assert "".join(parts).replace("\n", "") == text.replace("\n", "")


def test_a_text_that_fits_comes_back_whole() -> None:
    assert telegram.split("") == [""]
    assert telegram.split("a\n\nb") == ["a\n\nb"]
    assert telegram.split("x" * 4096) == ["x" * 4096]


def test_the_limit_counts_utf16_units_so_an_emoji_counts_twice() -> None:
    text = "a" * 4095 + "\U0001f600"  # 4,097 units in 4,096 characters
    assert telegram.split(text) == ["a" * 4095, "\U0001f600"]


@pytest.mark.parametrize("emoji", [FAMILY, THUMB, FLAG, "\U0001f600", "1\ufe0f\u20e3", "e\u0301"])
@pytest.mark.parametrize("shift", range(8))
def test_an_emoji_at_the_boundary_is_never_cut_in_two(emoji: str, shift: int) -> None:
    text = "a" * (995 + shift) + emoji + "b" * 20
    parts = telegram.split(text, 1000)
    assert "".join(parts) == text
    assert all(telegram.utf16_len(part) <= 1000 for part in parts)
    assert any(emoji in part for part in parts), parts


def test_flags_in_a_row_are_cut_between_pairs() -> None:
    text = FLAG * 300  # 1,200 units
    first, second = telegram.split(text, 1002)  # 1,002 would split the 251st flag
    assert first == FLAG * 250 and second == FLAG * 50


def test_split_prefers_a_paragraph_then_a_line_then_a_word() -> None:
    para = "p" * 600 + "\n\n" + "q" * 300 + "\n" + "r" * 300
    assert telegram.split(para, 1000) == ["p" * 600, "q" * 300 + "\n" + "r" * 300]
    lines = "p" * 300 + "\n\n" + "q" * 300 + "\n" + "r" * 600
    assert telegram.split(lines, 1000) == ["p" * 300 + "\n\n" + "q" * 300, "r" * 600]
    words = "word " * 300
    first, *_ = telegram.split(words, 1000)
    assert first.endswith("word ") and len(first) <= 1000


def test_split_never_cuts_an_entity_or_tag() -> None:
    line = "a" * 997 + "&amp;" + "b" * 10  # a cut at 1000 would fall inside "&amp;"
    first, second = telegram.split(line, 1000)
    assert first == "a" * 997 and second.startswith("&amp;")
    tagged = "x " * 495 + '<a href="https://e.example/a b">link</a>'
    for part in telegram.split(tagged, 1000):
        assert part.count("<") == part.count(">")


def test_a_limit_too_small_for_an_escape_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 8"):
        telegram.split("text", 7)
