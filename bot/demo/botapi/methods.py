"""The Bot API surface of the local server: one small handler per method, in `METHODS`.

Each handler takes a `Request` (state, token, parameters, the time) and returns the
`result` Telegram would return, or raises `ApiError` with Telegram's status and wording.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from bot.demo.botapi import calls, media
from bot.demo.botapi.calls import Request, Upload
from bot.demo.botapi.state import ApiError, bad_request, user_object

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
        timeout=min(max(request.get_int("timeout", 0), 0), calls.MAX_POLL_TIMEOUT),
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
    text, entities = calls.text_and_entities(request)
    preview = media.link_preview_options(request.params)
    return _from_bot(request, chat_id, text, entities, link_preview_options=preview)


def _from_bot(
    request: Request, chat_id: int, text: str, entities: list[dict[str, Any]], **shown: Any
) -> Any:
    """A message the bot sends to `chat_id` (in reply, in a topic, with buttons, as the
    request asks); `shown`: what else it carries (a photo, a link preview)."""
    reply_to = calls.reply_to(request, chat_id)
    message = request.state.add_message(
        chat_id,
        from_bot=True,
        sender=request.bot_user(),
        text=text,
        entities=entities,
        reply_markup=calls.reply_markup(request),
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
    gifts = {
        "unlimited_gifts": False,
        "limited_gifts": False,
        "unique_gifts": False,
        "premium_subscription": False,
        "gifts_from_channels": False,
    }
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
    chat_id, message_id = calls.edit_target(request)
    text, entities = calls.text_and_entities(request)
    # As on Telegram, an edit without reply_markup removes the inline keyboard.
    message = request.state.edit(
        chat_id,
        message_id,
        request.now,
        text=text,
        entities=entities,
        reply_markup=calls.reply_markup(request),
        link_preview_options=media.link_preview_options(request.params),
    )
    return request.state.telegram_message(message)


def edit_message_reply_markup(request: Request) -> Any:
    chat_id, message_id = calls.edit_target(request)
    message = request.state.edit(
        chat_id, message_id, request.now, reply_markup=calls.reply_markup(request)
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
