"""Pictures on the local Bot API server: link preview options and sendPhoto.

Checked as Telegram checks them: `link_preview_options` is a LinkPreviewOptions object
(its flags booleans, at most one of prefer_small_media / prefer_large_media, its url an
http(s) URL); a photo is uploaded as a PNG file or named by an http(s) URL (kept, not
fetched: the server works offline); a caption is at most 1,024 characters after entity
parsing.
"""

from __future__ import annotations

from typing import Any

from bot.demo.botapi import html as localapi_html
from bot.demo.botapi.state import bad_request

#: Telegram's limit on a photo's caption, after entity parsing.
MAX_CAPTION = 1024
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: The fields of a LinkPreviewOptions object that are booleans.
_PREVIEW_FLAGS = ("is_disabled", "prefer_small_media", "prefer_large_media", "show_above_text")


def link_preview_options(params: dict[str, Any]) -> dict[str, Any] | None:
    """The request's LinkPreviewOptions as sent, or None; a 400 names what is wrong."""
    options = params.get("link_preview_options")
    if options is None:
        return None
    if not isinstance(options, dict):
        raise bad_request("link_preview_options must be a LinkPreviewOptions JSON object")
    for flag in _PREVIEW_FLAGS:
        if flag in options and not isinstance(options[flag], bool):
            raise bad_request(f"link_preview_options: field {flag!r} must be a Boolean")
    if options.get("prefer_small_media") and options.get("prefer_large_media"):
        raise bad_request(
            "link_preview_options: prefer_small_media and prefer_large_media can't both be set"
        )
    if "url" in options and not is_http_url(options["url"]):
        raise bad_request("link_preview_options: url must be an HTTP or HTTPS URL")
    return options


def is_http_url(value: object) -> bool:
    return isinstance(value, str) and value.lower().startswith(("http://", "https://"))


def caption(params: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A photo's caption and its entities (parse_mode HTML parsed), within MAX_CAPTION."""
    text = params.get("caption") or ""
    if not isinstance(text, str):
        raise bad_request("caption must be a string")
    entities: list[dict[str, Any]] = params.get("caption_entities") or []
    text, entities = formatted(text, params.get("parse_mode"), entities)
    if len(text) > MAX_CAPTION:
        raise bad_request("message caption is too long")
    return text, entities


def formatted(
    text: str, parse_mode: Any, entities: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]]]:
    """A text and its entities as a message keeps them: HTML parsed into entities;
    Markdown modes stored as given (no test or demo relies on their parsing yet)."""
    mode = str(parse_mode or "").lower()
    if mode == "html":
        try:
            return localapi_html.parse(text)
        except localapi_html.ParseError as exc:
            raise bad_request(f"can't parse entities: {exc}") from None
    if mode not in ("", "markdown", "markdownv2"):
        raise bad_request(f"unsupported parse_mode {parse_mode!r}")
    return text, entities


def png_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG's header chunk, or None if `data` is not a PNG."""
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
