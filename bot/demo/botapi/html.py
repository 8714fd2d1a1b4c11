"""Telegram's HTML parse mode for the local Bot API server: markup in, text and entities out.

Telegram strips the tags from an HTML message and returns the plain text with a list of
entities whose offsets and lengths count UTF-16 code units. The local server does the same,
so "message is not modified" and the 4096 limit compare what Telegram compares, and an
unsupported tag fails the way it fails against Telegram.
"""

from __future__ import annotations

import html.parser
from typing import Any

from pipelines.text import telegram as telegram_text

# Tag -> entity type, as documented for parse_mode=HTML.
_SIMPLE_TAGS = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "tg-spoiler": "spoiler",
    "code": "code",
    "pre": "pre",
    "blockquote": "blockquote",
    "a": "text_link",
    "span": "spoiler",
    "tg-emoji": "custom_emoji",
}


class ParseError(ValueError):
    """The text is not valid Telegram HTML; the message says what Telegram would say."""


class _Parser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        # Not `offset`: HTMLParser keeps its own source position under that name.
        self.position = 0
        self.open_tags: list[tuple[str, int, dict[str, Any]]] = []
        self.entities: list[dict[str, Any]] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)
        self.position += telegram_text.utf16_len(data)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SIMPLE_TAGS:
            raise ParseError(f'Unsupported start tag "{tag}"')
        values = {name: value or "" for name, value in attrs}
        if tag == "span" and values.get("class") != "tg-spoiler":
            raise ParseError('Tag "span" must have class "tg-spoiler"')
        self.open_tags.append((tag, self.position, values))

    def handle_endtag(self, tag: str) -> None:
        if not self.open_tags or self.open_tags[-1][0] != tag:
            raise ParseError(f'Unexpected end tag "{tag}"')
        _, start, attrs = self.open_tags.pop()
        if self.open_tags and self.open_tags[-1][0] == "pre" and tag == "code":
            # <pre><code class="language-x"> is one pre entity carrying the language.
            language = attrs.get("class", "").removeprefix("language-")
            self.open_tags[-1][2]["language"] = language
            return
        self._add_entity(tag, start, attrs)

    def _add_entity(self, tag: str, start: int, attrs: dict[str, Any]) -> None:
        length = self.position - start
        if length == 0:
            return  # Telegram drops empty entities.
        entity: dict[str, Any] = {"type": _SIMPLE_TAGS[tag], "offset": start, "length": length}
        if tag == "a":
            entity["url"] = attrs.get("href", "")
        elif tag == "pre" and attrs.get("language"):
            entity["language"] = attrs["language"]
        elif tag == "blockquote" and "expandable" in attrs:
            entity["type"] = "expandable_blockquote"
        elif tag == "tg-emoji":
            entity["custom_emoji_id"] = attrs.get("emoji-id", "")
        self.entities.append(entity)


def parse(markup: str) -> tuple[str, list[dict[str, Any]]]:
    """Return the plain text and the entities of an HTML-formatted message.

    Raises ParseError for an unsupported or unbalanced tag.
    """
    parser = _Parser()
    parser.feed(markup)
    parser.close()
    if parser.open_tags:
        tag = parser.open_tags[-1][0]
        raise ParseError(f'Can\'t find end tag corresponding to start tag "{tag}"')
    entities = sorted(parser.entities, key=lambda e: (e["offset"], -e["length"]))
    return "".join(parser.parts), entities
