"""The local Bot API server's control API over HTTP: `/control/<name>` with JSON.

Each route mirrors a Python method of `localapi.LocalBotApi` with the same parameter names,
taken from the query string or a JSON body; answers are `{"ok": true, "result": ...}`, or
400 `{"ok": false, "description": ...}` saying which parameter was wrong and what is valid.
`wait` long-polls until anything changes, so a web chat can follow a conversation live.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from bot.demo.botapi import state as localapi_state

#: The longest /control/wait long poll, in seconds.
MAX_WAIT = 60.0
#: Routes that only read: a GET with a query string may call them. Every other route
#: changes state and takes a JSON POST only, so a page elsewhere cannot call it with a
#: form, an image or a link.
READS = frozenset({"sent", "messages", "history", "callback_answers", "calls", "wait", "info"})

_REQUIRED = object()


class ControlError(ValueError):
    """A control request with a missing or malformed parameter."""


class Driven(Protocol):
    """What the routes drive: `server.LocalBotApi`, named by shape so no import runs back."""

    state: localapi_state.LocalApiState

    def inject_message(
        self, chat_id: int, from_user_id: int, text: str, reply_to_message_id: int | None = None
    ) -> dict[str, Any]: ...

    def inject_command(self, chat_id: int, user_id: int, text: str) -> dict[str, Any]: ...

    def inject_callback(self, chat_id: int, user_id: int, message_id: int, data: str) -> str: ...

    def sent(self, chat_id: int | None = None) -> list[localapi_state.ChatMessage]: ...

    def messages(self, chat_id: int) -> list[localapi_state.ChatMessage]: ...

    def history(self, chat_id: int, message_id: int) -> list[localapi_state.ChatMessage]: ...

    def callback_answers(self) -> list[dict[str, Any]]: ...

    def calls(self, method: str | None = None) -> list[localapi_state.CallRecord]: ...

    def fail_next(
        self, method: str, status: int = 429, retry_after: int = 3, description: str | None = None
    ) -> None: ...

    def slow_next(self, method: str, seconds: float) -> None: ...


def _int(params: dict[str, Any], name: str, default: Any = _REQUIRED) -> Any:
    value = params.get(name, default)
    if value is _REQUIRED:
        raise ControlError(f"missing parameter {name!r} (an integer)")
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ControlError(f"parameter {name!r} must be an integer, got {value!r}") from None


def _float(params: dict[str, Any], name: str, default: float) -> float:
    try:
        return float(params.get(name, default))
    except (TypeError, ValueError):
        raise ControlError(f"parameter {name!r} must be a number") from None


def _str(params: dict[str, Any], name: str, default: Any = _REQUIRED) -> Any:
    value = params.get(name, default)
    if value is _REQUIRED:
        raise ControlError(f"missing parameter {name!r} (a string)")
    if value is not None and not isinstance(value, str):
        raise ControlError(f"parameter {name!r} must be a string, got {value!r}")
    return value


def inject_message(api: Driven, p: dict[str, Any]) -> Any:
    return api.inject_message(
        _int(p, "chat_id"),
        _int(p, "from_user_id"),
        _str(p, "text"),
        reply_to_message_id=_int(p, "reply_to_message_id", None),
    )


def inject_command(api: Driven, p: dict[str, Any]) -> Any:
    return api.inject_command(_int(p, "chat_id"), _int(p, "user_id"), _str(p, "text"))


def inject_callback(api: Driven, p: dict[str, Any]) -> Any:
    return api.inject_callback(
        _int(p, "chat_id"), _int(p, "user_id"), _int(p, "message_id"), _str(p, "data")
    )


def sent(api: Driven, p: dict[str, Any]) -> Any:
    return api.sent(_int(p, "chat_id", None))


def messages(api: Driven, p: dict[str, Any]) -> Any:
    return api.messages(_int(p, "chat_id"))


def history(api: Driven, p: dict[str, Any]) -> Any:
    return api.history(_int(p, "chat_id"), _int(p, "message_id"))


def callback_answers(api: Driven, p: dict[str, Any]) -> Any:
    return api.callback_answers()


def calls(api: Driven, p: dict[str, Any]) -> Any:
    return api.calls(_str(p, "method", None))


def fail_next(api: Driven, p: dict[str, Any]) -> Any:
    api.fail_next(
        _str(p, "method"),
        status=_int(p, "status", 429),
        retry_after=_int(p, "retry_after", 3),
        description=_str(p, "description", None),
    )
    return True


def slow_next(api: Driven, p: dict[str, Any]) -> Any:
    api.slow_next(_str(p, "method"), _float(p, "seconds", 1.0))
    return True


def wait(api: Driven, p: dict[str, Any]) -> Any:
    """Return the state's revision once it passes `after` (or after `timeout` seconds)."""
    timeout = min(max(_float(p, "timeout", 10.0), 0.0), MAX_WAIT)
    return api.state.wait_revision(_int(p, "after", 0), timeout)


def info(api: Driven, p: dict[str, Any]) -> Any:
    """Settings the bot made: webhook, commands, chat actions; tokens only as bot ids."""
    state = api.state
    return {
        "revision": state.revision,
        "bot_ids": sorted({int(t.split(":", 1)[0]) for t in state.tokens_used}),
        "webhook": state.webhook,
        "commands": state.commands,
        "chat_actions": state.chat_actions,
        "pending_updates": state.pending_update_count(),
    }


ROUTES: dict[str, Callable[[Driven, dict[str, Any]], Any]] = {
    "inject_message": inject_message,
    "inject_command": inject_command,
    "inject_callback": inject_callback,
    "sent": sent,
    "messages": messages,
    "history": history,
    "callback_answers": callback_answers,
    "calls": calls,
    "fail_next": fail_next,
    "slow_next": slow_next,
    "wait": wait,
    "info": info,
}


def handle(api: Driven, name: str, params: dict[str, Any]) -> tuple[int, Any]:
    """Run one control route: (HTTP status, JSON body)."""
    route = ROUTES.get(name)
    if route is None:
        known = ", ".join(sorted(ROUTES))
        return 404, {"ok": False, "description": f"unknown control {name!r}; known: {known}"}
    try:
        return 200, {"ok": True, "result": route(api, params)}
    except ValueError as exc:  # ControlError, and the API's own checks of its arguments
        return 400, {"ok": False, "description": f"{name}: {exc}"}
