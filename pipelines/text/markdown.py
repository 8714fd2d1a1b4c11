"""Markdown notes as plain text that reads well in Telegram (and in any target).

Cards and dispatched messages are plain text, so markdown's marks would show as
literal `#`, `**` and `[..](..)`. This keeps what they mean in words and symbols a
phone shows as is: a heading is its own line, a list item a bullet, a link its text
followed by its address. Not a markdown parser: the common marks of notes, line by
line, and anything unknown passes through unchanged.
"""

from __future__ import annotations

import re

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_BULLET = re.compile(r"^(\s*)[-*+][ \t]+")
_RULE = re.compile(r"^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_QUOTE = re.compile(r"^ {0,3}>[ \t]?")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
# Single `_` only around whole words, so snake_case names keep their underscores.
_EMPHASIS = re.compile(
    r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?!\*)|(?<!\w)_(?=\S)([^_]+?)(?<=\S)_(?!\w)"
)
_CODE = re.compile(r"`([^`]+)`")
_BLANKS = re.compile(r"\n{3,}")


def to_plain(text: str) -> str:
    """`text` (markdown) as plain text: the same words, without the marks."""
    lines: list[str] = []
    in_code = False
    for line in text.splitlines():
        if _FENCE.match(line):
            in_code = not in_code  # the fence itself is markup; the code inside is kept
            continue
        lines.append(line if in_code else _line(line))
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def _line(line: str) -> str:
    if _RULE.match(line):
        return ""
    heading = _HEADING.match(line)
    if heading:
        return _inline(heading.group(1))
    line = _QUOTE.sub("", line)
    line = _BULLET.sub(lambda m: f"{m.group(1)}• ", line)
    return _inline(line)


def _inline(text: str) -> str:
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(
        lambda m: m.group(1) if m.group(1) == m.group(2) else f"{m.group(1)} ({m.group(2)})", text
    )
    text = _STRONG.sub(r"\2", text)
    text = _EMPHASIS.sub(lambda m: m.group(1) or m.group(2), text)
    return _CODE.sub(r"\1", text)
