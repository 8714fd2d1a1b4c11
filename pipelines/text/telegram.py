"""Text bound for Telegram: its 4,096-unit message limit.

    parts = telegram.split(html_text)          # messages of at most 4,096 UTF-16 units

(The bot token and every other secret are kept out of sight by pipelines.text.redaction.)

Telegram counts a message in UTF-16 code units, so an emoji outside the Basic
Multilingual Plane counts twice. `split` takes HTML whose tags never span a line
(as the bot and dispatch write it) and cuts between paragraphs, else between lines,
else after a word, and never inside a tag, an escape such as `&amp;` or a character
built of several code points (an emoji with a skin tone, a family joined by ZWJ, a flag).
"""

from __future__ import annotations

import unicodedata

#: Telegram's limit on a message's text, in UTF-16 code units. We count the HTML, which
#: is never shorter than the text Telegram counts after parsing it.
MAX_MESSAGE = 4096
#: The smallest limit `split` accepts: room for the longest escape it never cuts.
MIN_LIMIT = 8
_ZWJ = "\u200d"
# Code points that attach to the one before them: variation selectors, skin tones, the
# keycap mark and emoji tag characters (combining marks are found by unicodedata).
_EXTENDERS = (
    {"\ufe0e", "\ufe0f", "\u20e3"}
    | {chr(c) for c in range(0x1F3FB, 0x1F400)}
    | {chr(c) for c in range(0xE0020, 0xE0080)}
)
_REGIONAL = range(0x1F1E6, 0x1F200)


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's limits and entity offsets."""
    return len(text.encode("utf-16-le")) // 2


def split(text: str, limit: int = MAX_MESSAGE) -> list[str]:
    """Cut `text` into parts of at most `limit` UTF-16 units; only newlines at a cut are lost.

    A text that fits comes back whole (an empty one as `[""]`).
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT} UTF-16 units, got {limit}")
    parts: list[str] = []
    while utf16_len(text) > limit:
        cut = _cut(text, limit)
        if part := text[:cut].rstrip("\n"):
            parts.append(part)
        text = text[cut:].lstrip("\n")
    if text or not parts:
        parts.append(text)
    return parts


def _cut(text: str, limit: int) -> int:
    """Where the first part ends: the best boundary within `limit` units, never at 0."""
    fit = _whole_characters(text, _fit(text, limit))
    head = text[:fit]
    paragraph = head.rfind("\n\n")
    if paragraph > fit // 2:
        return paragraph + 2
    line = head.rfind("\n")
    if line > 0:
        return line + 1
    space = head.rfind(" ")
    if space > fit // 2 and (safe := _outside_markup(head, space + 1)) > fit // 2:
        return safe
    return _outside_markup(head, fit)


def _fit(text: str, limit: int) -> int:
    """The longest prefix of `text` within `limit` UTF-16 units, as a character count."""
    used = 0
    for index, char in enumerate(text):
        used += 2 if ord(char) > 0xFFFF else 1
        if used > limit:
            return index
    return len(text)


def _whole_characters(text: str, cut: int) -> int:
    """Step `cut` back until it does not split a character made of several code points."""
    at = cut
    while 0 < at < len(text) and _joined(text, at):
        at -= 1
    return at or cut  # one "character" longer than a message: cut it anyway


def _joined(text: str, at: int) -> bool:
    """Whether the code points either side of `at` belong to one visible character."""
    after, before = text[at], text[at - 1]
    if after in _EXTENDERS or after == _ZWJ or before == _ZWJ or unicodedata.combining(after):
        return True
    if ord(after) in _REGIONAL and ord(before) in _REGIONAL:
        run = 0  # flags are pairs of regional indicators: a cut after an odd run splits one
        while run < at and ord(text[at - 1 - run]) in _REGIONAL:
            run += 1
        return run % 2 == 1
    return False


def _outside_markup(head: str, cut: int) -> int:
    """`cut`, moved back to the start of a tag or an escape that it would end inside."""
    for opener, closer in (("<", ">"), ("&", ";")):
        start = head.rfind(opener, 0, cut)
        if start > head.rfind(closer, 0, cut) and start > 0:
            cut = min(cut, start)
    return cut
