"""The Bot API surface of the local server: one small handler per method, in `METHODS`.

Each handler takes a `Request` (state, token, parameters, the time) and returns the
`result` Telegram would return, or raises `ApiError` with Telegram's status and wording.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from bot.demo.botapi import media
from bot.demo.botapi.objects import bot_object
from bot.demo.botapi.state import ApiError, LocalApiState, bad_request, user_object

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
_CHAT_ACTIONS = frozenset(
    {
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
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
        return _int(name, self.params.get(name, default))

    def chat_id(self) -> int:
        return self.chat(self.params.get("chat_id"))

    def chat(self, value: Any) -> int:
        """A chat named by its id, or a group by its @username."""
        if isinstance(value, str) and value.startswith("@"):
            group = self.state.groups.by_username(value)
            if group is None:
                raise bad_request("chat not found")  # only groups added with a username
            return group.id
        return _int("chat_id", value)

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


def _int(name: str, value: Any) -> int:
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


def _text_and_entities(request: Request) -> tuple[str, list[dict[str, Any]]]:
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


def _reply_markup(request: Request) -> dict[str, Any] | None:
    markup = request.params.get("reply_markup")
    if markup is None:
        return None
    if not isinstance(markup, dict):
        raise bad_request("reply_markup must be a JSON object")
    for row in markup.get("inline_keyboard", []):
        for button in row:
            _check_button(button)
    return markup


def _check_button(button: dict[str, Any]) -> None:
    if not button.get("text"):
        raise bad_request("button text is empty")
    if not _BUTTON_ACTIONS & button.keys():
        raise bad_request("text buttons are unallowed in the inline keyboard")
    data = button.get("callback_data")
    if data is not None and not 1 <= len(str(data).encode()) <= MAX_CALLBACK_DATA:
        raise bad_request("BUTTON_DATA_INVALID")


def _reply_to(request: Request, chat_id: int) -> int | None:
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
    message_id = _int("message_id", named)
    allow_missing = reply.get("allow_sending_without_reply") is True or request.get_bool(
        "allow_sending_without_reply"
    )
    if request.state.find(chat_id, message_id) is None:
        if allow_missing:
            return None
        raise bad_request("message to be replied not found")
    return message_id


def _edit_target(request: Request) -> tuple[int, int]:
    if "inline_message_id" in request.params:
        raise bad_request("inline messages are not supported by the local server")
    return request.chat_id(), request.get_int("message_id")


# -- handlers -----------------------------------------------------------------


def get_me(request: Request) -> Any:
    return request.bot_user()


def get_updates(request: Request) -> Any:
    if request.state.webhook is not None:
        raise ApiError(
            409,
            "Conflict: can't use getUpdates method while webhook is active;"
            " use deleteWebhook to delete the webhook first",
        )
    allowed = request.params.get("allowed_updates")
    return request.state.take_updates(
        offset=request.get_int("offset", 0),
        limit=min(max(request.get_int("limit", 100), 1), 100),
        timeout=min(max(request.get_int("timeout", 0), 0), MAX_POLL_TIMEOUT),
        allowed=list(allowed) if isinstance(allowed, list) else None,
    )


def set_webhook(request: Request) -> Any:
    url = request.get_str("url")
    webhook = None
    if url:
        webhook = {"url": url, "allowed_updates": request.params.get("allowed_updates")}
        webhook["has_secret_token"] = bool(request.params.get("secret_token"))
    request.state.set_webhook(webhook)
    if request.get_bool("drop_pending_updates"):
        request.state.drop_pending_updates()
    return True


def delete_webhook(request: Request) -> Any:
    request.state.set_webhook(None)
    if request.get_bool("drop_pending_updates"):
        request.state.drop_pending_updates()
    return True


def get_webhook_info(request: Request) -> Any:
    webhook = request.state.webhook or {"url": ""}
    info = {
        "url": webhook["url"],
        "has_custom_certificate": False,
        "pending_update_count": request.state.pending_update_count(),
    }
    if webhook.get("allowed_updates"):
        info["allowed_updates"] = webhook["allowed_updates"]
    return info


def _commands_key(request: Request) -> str:
    scope = request.params.get("scope") or {"type": "default"}
    return json.dumps([scope, request.get_str("language_code")], sort_keys=True)


def set_my_commands(request: Request) -> Any:
    commands = request.params.get("commands")
    if not isinstance(commands, list) or len(commands) > 100:
        raise bad_request("commands must be a JSON array of at most 100 BotCommand objects")
    for command in commands:
        if not isinstance(command, dict) or not command.get("command"):
            raise bad_request("command must be non-empty")
        if not command.get("description"):
            raise bad_request("command description must be non-empty")
    request.state.set_commands(_commands_key(request), commands)
    return True


def get_my_commands(request: Request) -> Any:
    return request.state.commands.get(_commands_key(request), [])


def send_message(request: Request) -> Any:
    chat_id = request.chat_id()
    text, entities = _text_and_entities(request)
    preview = media.link_preview_options(request.params)
    return _from_bot(request, chat_id, text, entities, link_preview_options=preview)


def _from_bot(
    request: Request, chat_id: int, text: str, entities: list[dict[str, Any]], **shown: Any
) -> Any:
    """A message the bot sends to `chat_id` (in reply, in a topic, with buttons, as the
    request asks); `shown`: what else it carries (a photo, a link preview)."""
    reply_to = _reply_to(request, chat_id)
    message = request.state.add_message(
        chat_id,
        from_bot=True,
        sender=request.bot_user(),
        text=text,
        entities=entities,
        reply_markup=_reply_markup(request),
        reply_to_message_id=reply_to,
        now=request.now,
        message_thread_id=request.thread(chat_id, reply_to),
        **shown,
    )
    return request.state.telegram_message(message)


def create_forum_topic(request: Request) -> Any:
    name = request.get_str("name")
    thread = request.state.create_topic(request.chat_id(), name)
    return {"message_thread_id": thread, "name": name, "icon_color": 7322096}


def delete_forum_topic(request: Request) -> Any:
    request.state.delete_topic(request.chat_id(), request.get_int("message_thread_id"))
    return True


def get_chat_member(request: Request) -> Any:
    chat_id, user_id = request.chat_id(), request.get_int("user_id")
    group = request.state.groups.get(chat_id)
    if group is None or user_id not in group.members:
        raise bad_request("user not found")
    user = user_object(user_id, *request.state.names.get(user_id, ()))
    return {"status": "member", "user": user}


def get_chat(request: Request) -> Any:
    """A ChatFullInfo: the chat, and the fields Telegram always sends with it."""
    chat_id = request.chat_id()
    if chat_id < 0 and request.state.groups.get(chat_id) is None:
        raise bad_request("chat not found")
    gifts = {"unlimited_gifts": False, "limited_gifts": False, "unique_gifts": False,
             "premium_subscription": False, "gifts_from_channels": False}  # fmt: skip
    full = {"accent_color_id": 0, "max_reaction_count": 11, "accepted_gift_types": gifts}
    return request.state.chat(chat_id) | full


def send_photo(request: Request) -> Any:
    """A photo uploaded as a file (multipart; PNG only here) or named by an http(s) URL,
    which Telegram would fetch and the local server keeps as it is."""
    chat_id = request.chat_id()
    photo = request.params.get("photo")
    url, picture = None, None
    if isinstance(photo, Upload):
        size = media.png_size(photo.content)
        if size is None:
            raise bad_request("IMAGE_PROCESS_FAILED: the local server reads PNG pictures only")
        meta = {"width": size[0], "height": size[1], "file_size": len(photo.content)}
        picture = (photo.content, meta)
    elif media.is_http_url(photo):
        url = str(photo)
    else:
        raise bad_request("wrong file identifier/HTTP URL specified")
    text, entities = media.caption(request.params)
    return _from_bot(request, chat_id, text, entities, photo=picture, photo_url=url)


def edit_message_text(request: Request) -> Any:
    chat_id, message_id = _edit_target(request)
    text, entities = _text_and_entities(request)
    # As on Telegram, an edit without reply_markup removes the inline keyboard.
    message = request.state.edit(
        chat_id,
        message_id,
        request.now,
        text=text,
        entities=entities,
        reply_markup=_reply_markup(request),
        link_preview_options=media.link_preview_options(request.params),
    )
    return request.state.telegram_message(message)


def edit_message_reply_markup(request: Request) -> Any:
    chat_id, message_id = _edit_target(request)
    message = request.state.edit(
        chat_id, message_id, request.now, reply_markup=_reply_markup(request)
    )
    return request.state.telegram_message(message)


def answer_callback_query(request: Request) -> Any:
    text = request.get_str("text")
    if len(text) > 200:
        raise bad_request("MESSAGE_TOO_LONG")
    answer = {
        "text": text,
        "show_alert": request.get_bool("show_alert"),
        "url": request.params.get("url"),
        "cache_time": request.get_int("cache_time", 0),
    }
    request.state.answer_callback(request.get_str("callback_query_id"), answer)
    return True


def delete_message(request: Request) -> Any:
    request.state.delete(request.chat_id(), request.get_int("message_id"))
    return True


def send_chat_action(request: Request) -> Any:
    action = request.get_str("action")
    if action not in _CHAT_ACTIONS:
        raise bad_request("wrong parameter action in request")
    request.state.record_chat_action(request.chat_id(), action)
    return True


def log_out(request: Request) -> Any:
    return True


METHODS: dict[str, Callable[[Request], Any]] = {
    "getme": get_me,
    "getupdates": get_updates,
    "setwebhook": set_webhook,
    "deletewebhook": delete_webhook,
    "getwebhookinfo": get_webhook_info,
    "setmycommands": set_my_commands,
    "getmycommands": get_my_commands,
    "sendmessage": send_message,
    "sendphoto": send_photo,
    "createforumtopic": create_forum_topic,
    "deleteforumtopic": delete_forum_topic,
    "getchat": get_chat,
    "getchatmember": get_chat_member,
    "editmessagetext": edit_message_text,
    "editmessagereplymarkup": edit_message_reply_markup,
    "answercallbackquery": answer_callback_query,
    "deletemessage": delete_message,
    "sendchataction": send_chat_action,
    "logout": log_out,
    "close": log_out,
}
"""Method name, lower-cased (Telegram's method names are case-insensitive) -> handler."""
