"""A local Telegram Bot API server for tests and the offline demo.

Run it by hand (any well-formed token is accepted):

    python -m bot.demo.botapi.localapi --port 8081

then point the bot at it with `GATEHOUSE_TELEGRAM__BASE_URL=http://127.0.0.1:8081/bot`.
In Python:

    with localapi.LocalBotApi() as api:
        app = ApplicationBuilder().token(T).base_url(api.base_url).build()
        api.inject_command(chat_id=42, user_id=42, text="/status news")
        api.wait_for(lambda: api.sent(42), timeout=5)

Bot API requests go to `/bot<token>/<method>` (see `localapi_methods.METHODS`). The control
API plays the other side of the chat: the Python methods below, and the same as JSON over
HTTP under `/control/<name>` (see `localapi_control.ROUTES`) for another process or a page.
"""

from __future__ import annotations

import argparse
import asyncio
import http
import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from bot.demo.botapi import calls
from bot.demo.botapi import groups as localapi_groups
from bot.demo.botapi import http as localapi_http
from bot.demo.botapi import methods as localapi_methods
from bot.demo.botapi import objects as localapi_objects
from bot.demo.botapi import state as localapi_state

T = TypeVar("T")
logger = logging.getLogger(__name__)

_TOKEN = re.compile(r"^\d+:[A-Za-z0-9_-]+$")
#: The only address the server binds: it is a fake, never reachable from another machine.
HOST = "127.0.0.1"
# Parameters whose values are secrets and must not be kept in the call log.
_SECRET_PARAMS = frozenset({"secret_token"})


class LocalBotApi:
    """The server plus the control API a test (or the demo's web chat) drives it with."""

    def __init__(
        self,
        token: str | None = None,
        *,
        port: int = 0,
        cors_origin: str | None = None,
    ) -> None:
        """`token`: if given, other tokens get 401. `cors_origin`: a page origin allowed to
        call `/control/...` from a browser (none by default)."""
        self.state = localapi_state.LocalApiState()
        self.token = token
        self.cors_origin = cors_origin
        #: user id -> (first name, username) their updates carry.
        self.names = self.state.names
        self._address = (HOST, port)
        self._server: localapi_http.Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------

    def start(self) -> LocalBotApi:
        self._server = localapi_http.Server(self._address, localapi_http.Handler, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        logger.info("local Bot API listening on %s", self.base_url)
        return self

    def stop(self) -> None:
        """Stop accepting, end long polls and keep-alive connections, join every thread."""
        if self._server is None or self._thread is None:
            return
        self._server.shutdown()
        self._server.closing = True
        self.state.close()  # pending long polls answer now, then their connections close
        self._server.close_connections()
        self._server.server_close()
        self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> LocalBotApi:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the local Bot API server is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """For `ApplicationBuilder().base_url(...)`: PTB appends the token and the method."""
        return f"http://{HOST}:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://{HOST}:{self.port}/file/bot"

    @property
    def control_url(self) -> str:
        return f"http://{HOST}:{self.port}/control"

    # -- the user's side of the chat ------------------------------------------

    def inject_message(
        self,
        chat_id: int,
        from_user_id: int,
        text: str,
        reply_to_message_id: int | None = None,
        *,
        entities: list[dict[str, Any]] | None = None,
        thread: int | None = None,
    ) -> dict[str, Any]:
        """A user writes `text` in the chat (in forum topic `thread`, or the replied
        message's); returns the queued Update."""
        if not text:
            raise ValueError("text must be a non-empty string")
        if len(text) > calls.MAX_TEXT:
            # What Telegram answers, and no client can send a longer message anyway.
            raise ValueError(
                f"Bad Request: message is too long ({len(text)} characters;"
                f" at most {calls.MAX_TEXT})"
            )
        replied = self.state.find(chat_id, reply_to_message_id) if reply_to_message_id else None
        if reply_to_message_id is not None and replied is None:
            raise ValueError(f"chat {chat_id} has no message {reply_to_message_id} to reply to")
        message = self.state.add_message(
            chat_id,
            from_bot=False,
            sender=localapi_state.user_object(from_user_id, *self.names.get(from_user_id, ())),
            text=text,
            entities=entities or [],
            reply_markup=None,
            reply_to_message_id=reply_to_message_id,
            now=int(time.time()),
            message_thread_id=thread or (replied.message_thread_id if replied else None),
        )
        return self.state.push_update({"message": self.state.telegram_message(message)})

    def name_user(self, user_id: int, first_name: str, username: str | None = None) -> None:
        """The names a user's later messages and taps carry (default: "User <id>")."""
        self.names[user_id] = (first_name, username)

    def inject_command(self, chat_id: int, user_id: int, text: str) -> dict[str, Any]:
        """A user sends a command such as "/status news", tagged as Telegram tags it."""
        if not text.startswith("/") or len(text) < 2:
            raise ValueError(f"a command starts with '/' and a name, got {text!r}")
        command = text.split(maxsplit=1)[0]
        entity = {"type": "bot_command", "offset": 0, "length": len(command)}
        return self.inject_message(chat_id, user_id, text, entities=[entity])

    # -- groups -----------------------------------------------------------------

    def add_group(
        self,
        chat_id: int,
        title: str,
        members: list[int],
        *,
        forum: bool = False,
        username: str | None = None,
    ) -> None:
        """A group (or, with a -100 id, a supergroup; with `forum`, a forum) the bot is in."""
        group = localapi_groups.Group(chat_id, title, set(members), forum, username)
        with self.state.lock:
            self.state.groups.add(group)

    def migrate_group(self, old: int, new: int, by_user_id: int) -> None:
        """Telegram upgrades the group to a supergroup: the bot gets the service messages,
        and from now on the old id answers 400 with migrate_to_chat_id."""
        by = localapi_state.user_object(by_user_id, *self.names.get(by_user_id, ()))
        self.state.migrate(old, new, by, int(time.time()))

    def set_bot_status(
        self, chat_id: int, status: localapi_groups.BotStatus, *, by_user_id: int | None = None
    ) -> None:
        """The bot is removed from the group ("kicked"), may no longer post ("restricted"),
        or is a member again ("member"); with `by_user_id`, Telegram tells the bot so in a
        my_chat_member update, as it does when an admin makes the change."""
        with self.state.lock:
            group = self.state.groups.get(chat_id)
            if group is None:
                raise ValueError(f"no group {chat_id}")
            before, group.bot_status = group.bot_status, status
            if by_user_id is None:
                return
            bot = localapi_objects.bot_object(self.token or "1:unknown")
            change = {
                "chat": self.state.chat(chat_id),
                "from": localapi_state.user_object(by_user_id, *self.names.get(by_user_id, ())),
                "date": int(time.time()),
                "old_chat_member": localapi_groups.member_object(bot, before),
                "new_chat_member": localapi_groups.member_object(bot, status),
            }
            self.state.push_update({"my_chat_member": change})

    def topics(self, chat_id: int) -> dict[int, str]:
        """A forum's topics, by message_thread_id."""
        with self.state.lock:
            group = self.state.groups.get(chat_id)
            return dict(group.topics) if group else {}

    def inject_callback(self, chat_id: int, user_id: int, message_id: int, data: str) -> str:
        """A user taps a button with `data` under a message; returns the callback_query id."""
        message = self.state.find(chat_id, message_id)
        if message is None:
            raise ValueError(f"chat {chat_id} has no message {message_id} to tap on")
        query = {
            "from": localapi_state.user_object(user_id, *self.names.get(user_id, ())),
            "chat_instance": f"local-{chat_id}",
            "message": self.state.telegram_message(message),
            "data": data,
        }
        query_id = self.state.open_callback(query)
        self.state.push_update({"callback_query": self.state.callback_query(query_id)})
        return query_id

    # -- what the bot did -----------------------------------------------------

    def sent(self, chat_id: int | None = None) -> list[localapi_state.ChatMessage]:
        """Messages the bot sent, current text and markup, in order (deleted ones left out)."""
        return self.state.sent(chat_id)

    def photo(self, chat_id: int, message_id: int) -> bytes | None:
        """The picture the bot sent as message `message_id` (sendPhoto), as uploaded."""
        return self.state.photo(chat_id, message_id)

    def messages(self, chat_id: int) -> list[localapi_state.ChatMessage]:
        """The whole chat as it looks now: the users' messages and the bot's."""
        return self.state.messages(chat_id)

    def history(self, chat_id: int, message_id: int) -> list[localapi_state.ChatMessage]:
        """Every version of one message: as sent, each edit, and a deletion."""
        return self.state.history(chat_id, message_id)

    def callback_answers(self) -> list[dict[str, Any]]:
        return self.state.callback_answers()

    def calls(self, method: str | None = None) -> list[localapi_state.CallRecord]:
        """Bot API requests answered so far, with their HTTP status (method as sent)."""
        return self.state.calls(method)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:
        """Block until `predicate()` is truthy and return its value (TimeoutError if not).

        Blocks the calling thread: from the event loop the bot runs in, use `await_for`.
        """
        return self.state.wait_for(predicate, timeout)

    # The wait runs in a worker thread that must end by itself: asyncio.timeout would only
    # cancel the await and leave the thread waiting, hence a timeout parameter.
    async def await_for(self, predicate: Callable[[], T], timeout: float = 5.0) -> T:  # noqa: ASYNC109
        """`wait_for` without blocking the event loop the bot under test runs in."""
        return await asyncio.to_thread(self.state.wait_for, predicate, timeout)

    # -- faults ---------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        status: int = 429,
        retry_after: int = 3,
        description: str | None = None,
    ) -> None:
        """The next call of `method` fails: 429 with retry_after by default, or any status."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error status (400-599), got {status}")
        if description is None:
            description = (
                f"Too Many Requests: retry after {retry_after}"
                if status == 429
                else http.HTTPStatus(status).phrase
            )
        after = retry_after if status == 429 else None
        self.state.add_fault(method.lower(), localapi_state.Fault(status, description, after))

    def answer_next(self, method: str, result: Any) -> None:
        """The next call of `method` is answered `{"ok": true, "result": result}` and not done."""
        self.state.add_fault(
            method.lower(), localapi_state.Fault(None, result=result, replace_result=True)
        )

    def slow_next(self, method: str, seconds: float) -> None:
        """The next call of `method` waits `seconds` before it is answered."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self.state.add_fault(method.lower(), localapi_state.Fault(None, delay=seconds))

    # -- serving a Bot API request --------------------------------------------

    def handle_bot_api(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        """Answer one Bot API call: (HTTP status, JSON body)."""
        status, body = self._answer(token, method, params)
        kept = {k: ("<redacted>" if k in _SECRET_PARAMS else v) for k, v in params.items()}
        self.state.record_call(method, status, kept, token if _TOKEN.match(token) else None)
        return status, body

    def _answer(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        if not _TOKEN.match(token):
            return _error(localapi_state.ApiError(404, "Not Found"))
        if self.token is not None and token != self.token:
            return _error(localapi_state.ApiError(401, "Unauthorized"))
        handler = localapi_methods.METHODS.get(method.lower())
        if handler is None:
            return _error(localapi_state.ApiError(404, "Not Found: method not found"))
        fault = self.state.take_fault(method.lower())
        if fault is not None:
            self.state.sleep(fault.delay)
            if fault.status is not None:
                parameters = {"retry_after": fault.retry_after} if fault.retry_after else None
                return _error(localapi_state.ApiError(fault.status, fault.description, parameters))
            if fault.replace_result:
                return 200, {"ok": True, "result": fault.result}
        try:
            decoded = calls.decode_params(params)
            request = calls.Request(self.state, token, decoded, int(time.time()))
            return 200, {"ok": True, "result": handler(request)}
        except localapi_state.ApiError as exc:
            return _error(exc)


def _error(exc: localapi_state.ApiError) -> tuple[int, Any]:
    body: dict[str, Any] = {"ok": False, "error_code": exc.status, "description": exc.description}
    if exc.parameters:
        body["parameters"] = exc.parameters
    return exc.status, body


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bot.demo.botapi.localapi", description=__doc__)
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--cors-origin", help="a page origin allowed to call /control")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    # Ctrl-C and SIGTERM are taken by sigwait below, never as an exception in the middle
    # of start-up or of a server thread: blocked before any thread starts, so all inherit it.
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    api = LocalBotApi(port=args.port, cors_origin=args.cors_origin).start()
    try:
        print(f"Bot API: {api.base_url}   control: {api.control_url}", flush=True)
        signal.sigwait(stop_signals)
    finally:
        api.stop()


if __name__ == "__main__":
    main()
