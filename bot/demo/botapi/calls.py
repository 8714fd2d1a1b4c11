"""A Bot API call as the local server reads it: its parameters decoded from JSON fields,
and checked the way Telegram checks them (text, buttons, a reply's target), each fault
an ApiError in Telegram's wording.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bot.demo.botapi import media
from bot.demo.botapi.objects import bot_object
from bot.demo.botapi.state import LocalApiState, bad_request

#: Telegram's limit on a message's text after entity parsing.
MAX_TEXT = 4096
#: Telegram's limit on a button's callback_data, in bytes.
MAX_CALLBACK_DATA = 64
#: The longest getUpdates long poll Telegram honours, in seconds.
MAX_POLL_TIMEOUT = 50

# Parameters that PTB (and Telegram's form encoding) send as JSON-encoded strings.
_JSON_FIELDS = frozenset(
    {
        "reply_markup",
        "reply_parameters",
        "allowed_updates",
        "commands",
        "scope",
        "entities",
        "caption_entities",
        "link_preview_options",
    }
)
_BUTTON_ACTIONS = frozenset(
    {
        "callback_data",
        "url",
        "web_app",
        "login_url",
        "switch_inline_query",
        "switch_inline_query_current_chat",
        "switch_inline_query_chosen_chat",
        "copy_text",
        "callback_game",
        "pay",
    }
)


@dataclasses.dataclass(frozen=True)
class Upload:
    """A file part of a multipart request."""

    filename: str
    content: bytes


@dataclasses.dataclass(frozen=True)
class Request:
    state: LocalApiState
    token: str
    params: dict[str, Any]
    now: int

    def bot_user(self) -> dict[str, Any]:
        return bot_object(self.token)

    def get_int(self, name: str, default: int | None = None) -> int:
        return as_int(name, self.params.get(name, default))

    def chat_id(self) -> int:
        return self.chat(self.params.get("chat_id"))

    def chat(self, value: Any) -> int:
        """A chat named by its id, or a group by its @username."""
        if isinstance(value, str) and value.startswith("@"):
            group = self.state.groups.by_username(value)
            if group is None:
                raise bad_request("chat not found")  # only groups added with a username
            return group.id
        return as_int("chat_id", value)

    def thread(self, chat_id: int, reply_to: int | None) -> int | None:
        """The forum topic to post in: message_thread_id, else the replied message's."""
        if self.params.get("message_thread_id") not in (None, ""):
            return self.get_int("message_thread_id")
        replied = self.state.find(chat_id, reply_to) if reply_to else None
        return replied.message_thread_id if replied else None

    def get_str(self, name: str, default: str = "") -> str:
        value = self.params.get(name, default)
        return value if isinstance(value, str) else json.dumps(value)

    def get_bool(self, name: str) -> bool:
        return self.params.get(name) in (True, "true", "True", "1", 1)


def as_int(name: str, value: Any) -> int:
    if value is None or value == "":
        raise bad_request(f"{name} is empty")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise bad_request(f"invalid {name} specified") from None


def decode_params(params: dict[str, Any]) -> dict[str, Any]:
    """Turn JSON-encoded nested fields into objects; reject ones that are not JSON."""
    decoded = dict(params)
    for name in _JSON_FIELDS & decoded.keys():
        if isinstance(decoded[name], str):
            try:
                decoded[name] = json.loads(decoded[name])
            except json.JSONDecodeError:
                raise bad_request(f"can't parse {name} JSON object") from None
    return decoded


def text_and_entities(request: Request) -> tuple[str, list[dict[str, Any]]]:
    text = request.get_str("text")
    if not text.strip():
        raise bad_request("message text is empty")
    entities: list[dict[str, Any]] = request.params.get("entities") or []
    text, entities = media.formatted(text, request.get_str("parse_mode"), entities)
    if len(text) > MAX_TEXT:
        raise bad_request("message is too long")
    if not text.strip():
        raise bad_request("message text is empty")
    return text, entities


def reply_markup(request: Request) -> dict[str, Any] | None:
    markup = request.params.get("reply_markup")
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise bad_request("reply_markup must be a JSON object")
    for row in markup.get("inline_keyboard", []):
        for button in row:
            check_button(button)
    return markup


def check_button(button: dict[str, Any]) -> None:
    if not button.get("text"):
        raise bad_request("button text is empty")
    if not _BUTTON_ACTIONS & button.keys():
        raise bad_request("text buttons are unallowed in the inline keyboard")
    data = button.get("callback_data")
    if data is not None and not 1 <= len(str(data).encode()) <= MAX_CALLBACK_DATA:
        raise bad_request("BUTTON_DATA_INVALID")


def reply_to(request: Request, chat_id: int) -> int | None:
    """The message a new one answers: reply_parameters (message_id; chat_id, when given,
    must be this chat; allow_sending_without_reply) or the older reply_to_message_id."""
    reply = request.params.get("reply_parameters") or {}
    if not isinstance(reply, dict):
        raise bad_request("reply_parameters must be a JSON object")
    if reply and "message_id" not in reply:
        raise bad_request("reply_parameters must name the message_id to reply to")
    if reply.get("chat_id") not in (None, "") and request.chat(reply["chat_id"]) != chat_id:
        # Telegram quotes a message of another chat as an external reply; not modelled here.
        raise bad_request("replies to a message in another chat are not supported locally")
    named = reply.get("message_id") or request.params.get("reply_to_message_id")
    if named in (None, ""):
        return None
    message_id = as_int("message_id", named)
    allow_missing = reply.get("allow_sending_without_reply") is True or request.get_bool(
        "allow_sending_without_reply"
    )
    if request.state.find(chat_id, message_id) is None:
        if allow_missing:
            return None
        raise bad_request("message to be replied not found")
    return message_id


def edit_target(request: Request) -> tuple[int, int]:
    if "inline_message_id" in request.params:
        raise bad_request("inline messages are not supported by the local server")
    return request.chat_id(), request.get_int("message_id")
