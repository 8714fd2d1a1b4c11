"""The Bot API's objects as the local server keeps them: messages, faults, call records,
errors, and the user and chat objects Telegram sends."""

from __future__ import annotations

import dataclasses
import time
from typing import Any


class ApiError(Exception):
    """A Bot API error answer: HTTP status, Telegram's description, optional parameters."""

    def __init__(
        self, status: int, description: str, parameters: dict[str, Any] | None = None
    ) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters


def bad_request(detail: str) -> ApiError:
    return ApiError(400, f"Bad Request: {detail}")


@dataclasses.dataclass(frozen=True)
class ChatMessage:
    """One version of a message in a chat, as the server stores it.

    `reply_markup` is the markup exactly as the bot sent it (inline keyboard, force_reply,
    ...); `version` counts from 1 and grows with each edit.
    """

    chat_id: int
    message_id: int
    from_bot: bool
    sender: dict[str, Any]
    text: str
    entities: list[dict[str, Any]]
    reply_markup: dict[str, Any] | None
    reply_to_message_id: int | None
    date: int
    edit_date: int | None = None
    version: int = 1
    deleted: bool = False
    #: A photo message: {"width", "height", "file_size"}; `text` is its caption and the
    #: picture's bytes are kept apart (`LocalApiState.photo`), so messages stay JSON.
    photo: dict[str, int] | None = None
    #: The forum topic the message is in (None: the chat itself, or its General topic).
    message_thread_id: int | None = None
    #: The LinkPreviewOptions the bot sent (a card's image: url, show_above_text, ...).
    link_preview_options: dict[str, Any] | None = None
    #: A photo sent by URL: the URL (Telegram would fetch it; the local server keeps it).
    photo_url: str | None = None


@dataclasses.dataclass(frozen=True)
class Fault:
    """An error (or a delay) the next call of a method will meet."""

    status: int | None  # None: no error, only the delay (or the `result` below)
    description: str = ""
    retry_after: int | None = None
    delay: float = 0.0
    #: Answer {"ok": true, "result": this} without doing the call (a malformed answer).
    result: Any = None
    replace_result: bool = False


@dataclasses.dataclass(frozen=True)
class CallRecord:
    """One Bot API request the server answered (the token is not kept here)."""

    method: str
    status: int
    params: dict[str, Any]
    #: time.monotonic() when it was answered.
    at: float = dataclasses.field(default_factory=time.monotonic)


def user_object(
    user_id: int, first_name: str | None = None, username: str | None = None
) -> dict[str, Any]:
    found = {"id": user_id, "is_bot": False, "first_name": first_name or f"User {user_id}"}
    return found | ({"username": username} if username else {})


def bot_object(token: str) -> dict[str, Any]:
    """The bot's own User, as getMe and a member update name it (its id is the token's)."""
    return {
        "id": int(token.split(":", 1)[0]),
        "is_bot": True,
        "first_name": "Gatehouse (local)",
        "username": "gatehouse_local_bot",
        "can_join_groups": True,
        "can_read_all_group_messages": False,
        "supports_inline_queries": False,
    }


def chat_object(chat_id: int) -> dict[str, Any]:
    """A Chat for an id: positive ids are private chats, -100... supergroups, else groups."""
    if chat_id > 0:
        return {"id": chat_id, "type": "private", "first_name": f"User {chat_id}"}
    kind = "supergroup" if str(chat_id).startswith("-100") else "group"
    return {"id": chat_id, "type": kind, "title": f"Chat {chat_id}"}


def update_type(update: dict[str, Any]) -> str:
    return next(key for key in update if key != "update_id")


def message_object(message: ChatMessage, chat: dict[str, Any]) -> dict[str, Any]:
    """The Message object Telegram would return for this version, without the message it
    replies to (the state adds that)."""
    result: dict[str, Any] = {
        "message_id": message.message_id,
        "from": message.sender,
        "chat": chat,
        "date": message.date,
    }
    if message.message_thread_id is not None:
        result["message_thread_id"] = message.message_thread_id
        result["is_topic_message"] = True
    if message.photo is not None or message.photo_url is not None:
        file_id = f"photo-{message.chat_id}-{message.message_id}"
        # A photo by URL is not fetched here: its size is Telegram's usual largest.
        size = message.photo or {"width": 1280, "height": 720}
        result["photo"] = [{"file_id": file_id, "file_unique_id": file_id, **size}]
        if message.text:
            result["caption"] = message.text
        if message.entities:
            result["caption_entities"] = message.entities
    else:
        result["text"] = message.text
        if message.entities:
            result["entities"] = message.entities
    if message.link_preview_options:
        result["link_preview_options"] = message.link_preview_options
    if message.edit_date is not None:
        result["edit_date"] = message.edit_date
    # Only inline keyboards show on a Message; force_reply and keyboards do not.
    if message.reply_markup and "inline_keyboard" in message.reply_markup:
        result["reply_markup"] = message.reply_markup
    return result
