"""The demo's web chat: a page on localhost that plays one operator's side of a Telegram chat
held by the local Bot API server (`bot.demo.botapi.localapi`).

    web = webchat.WebChat(api, operators=(1001,), port=0).start()
    print(web.url)          # open it in a browser
    ...
    web.stop()

The page (`bot/demo/static/`) shows the bot's messages as Telegram would (text with its
entities, inline keyboards, edits in place) and sends what the person types or taps as the
operator. It talks only to this server, same origin, through a small JSON API:

    GET  /api/chat?as=ID&room=1           {revision, user_id, operators, names, room,
                                           messages, answers, commands}
    GET  /api/wait?after=REV&timeout=S    {revision}: long-polls until the chat changes
    GET  /api/photo?message_id=N&as=ID    the picture of a photo message (a chart)
    POST /api/send {text, reply_to_message_id?, as?, room?}   a command or a message
    POST /api/tap  {message_id, data, as?, room?}             a tap; answers {query_id}

The operators are fixed here (`operators`; `as` picks one, the first by
default), each in their private chat, so the page can speak only as one of them, in their
own chat or in the demo's team room (`room`); nothing else of the local server's control
API (faults, other chats) is exposed.
Extra files (the demo's feed) are served read-only from `files`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import logging
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from bot.demo.botapi import http as localapi_http
from bot.demo.botapi import localapi

log = logging.getLogger(__name__)

#: The page and its script and style sheet, served as they are (no build step).
STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
#: The longest /api/wait the page may ask for (seconds); it asks again after.
MAX_WAIT_S = 25.0
#: A request body larger than this is refused (a chat message is at most 4096 chars).
MAX_BODY = 64 * 1024


class BadRequest(ValueError):
    """A page request with a missing or malformed field; the message says which."""


@dataclasses.dataclass(frozen=True)
class StaticFile:
    path: Path | None
    content_type: str
    #: The answer itself, when it is made rather than read from `path`.
    body: bytes | None = None

    @classmethod
    def of(cls, body: bytes, content_type: str) -> StaticFile:
        return cls(None, content_type, body)

    def read(self) -> bytes:
        if self.body is not None:
            return self.body
        assert self.path is not None, "a static file has a path or a body"
        return self.path.read_bytes()


class WebChat:
    """The HTTP server for the page, in its own thread (the Bot API state is thread-safe)."""

    def __init__(
        self,
        api: localapi.LocalBotApi,
        *,
        operators: tuple[int, ...],
        port: int = 0,
        files: dict[str, StaticFile] | None = None,
        room: tuple[int, str] | None = None,
    ) -> None:
        """`operators`: whom the page may speak as, the first unless it asks for another;
        each operator's private chat has their id. `room`: a group (id, title) the page
        can show and speak in, as any operator, instead of their private chat."""
        if not operators:
            raise ValueError("the page speaks as an operator: give at least one")
        self.api = api
        self.room = room
        self.user_id = operators[0]
        self.operators = operators
        self.files = dict(files or {})
        for name in ("index.html", "app.js", "style.css"):
            self.files["/" + name] = StaticFile(STATIC_DIR / name, STATIC_TYPES[Path(name).suffix])
        self.files["/"] = self.files["/index.html"]
        self._address = (localapi.HOST, port)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> WebChat:
        """Bind (OSError if the port is taken) and serve in a daemon thread."""
        self._server = _Server(self._address, _Handler, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="webchat",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; long polls still open end when the Bot API server stops."""
        if self._server is None or self._thread is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = self._thread = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the web chat is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{localapi.HOST}:{self.port}/"

    # -- the page's API ---------------------------------------------------------

    def operator(self, params: dict[str, Any]) -> int:
        """Who the page speaks as: the `as` field, one of the operators (default the first)."""
        if params.get("as") in (None, ""):
            return self.user_id
        who = _int(params, "as")
        if who not in self.operators:
            valid = ", ".join(map(str, self.operators))
            raise BadRequest(f"field 'as' must be one of the demo's operators: {valid}")
        return who

    def where(self, params: dict[str, Any], who: int) -> int:
        """The chat the page shows and speaks in: the team room when it asks for it
        (`room` true), else the operator's private chat."""
        if params.get("room") in (None, "", False, "0", "false"):
            return who
        if self.room is None:
            raise BadRequest("this demo has no team room")
        return self.room[0]

    def chat(self, params: dict[str, Any]) -> dict[str, Any]:
        """One operator's chat (or the team room) as it looks now, and the bot's answers
        to taps (toasts)."""
        who = self.operator(params)
        where = self.where(params, who)
        # Revision first: a change that lands while the rest is read only makes the page
        # read once more, never miss a change.
        revision = self.api.state.revision
        messages = [dataclasses.asdict(m) for m in self.api.messages(where)]
        answers = {
            str(a["callback_query_id"]): a.get("text") or "" for a in self.api.callback_answers()
        }
        lists = list(self.api.state.commands.values())
        return {
            "revision": revision,
            "user_id": who,
            "operators": list(self.operators),
            # As the cards name them ("Alex (@alex)"), so the switcher reads the same.
            "names": {str(o): self._label(o) for o in self.operators},
            "room": None if self.room is None else {"title": self.room[1], "open": where != who},
            "messages": messages,
            "answers": answers,
            "commands": lists[0] if lists else [],
        }

    def _label(self, user_id: int) -> str:
        first, username = self.api.names.get(user_id, (f"operator {user_id}", None))
        return f"{first} (@{username})" if username else first

    def wait(self, params: dict[str, Any]) -> dict[str, Any]:
        after = _int(params, "after")
        timeout = min(max(_float(params, "timeout", 20.0), 0.0), MAX_WAIT_S)
        return {"revision": self.api.state.wait_revision(after, timeout)}

    def send(self, params: dict[str, Any]) -> dict[str, Any]:
        text = params.get("text")
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("field 'text' must be a non-empty string")
        text = text.strip()
        who = self.operator(params)
        where = self.where(params, who)
        reply_to = params.get("reply_to_message_id")
        if text.startswith("/"):
            update = self.api.inject_command(where, who, text)
        else:
            reply = None if reply_to is None else _int(params, "reply_to_message_id")
            update = self.api.inject_message(where, who, text, reply)
        return {"update_id": update["update_id"]}

    def tap(self, params: dict[str, Any]) -> dict[str, Any]:
        data = params.get("data")
        if not isinstance(data, str) or not data:
            raise BadRequest("field 'data' must be the button's callback_data (a string)")
        message_id = _int(params, "message_id")
        who = self.operator(params)
        return {
            "query_id": self.api.inject_callback(self.where(params, who), who, message_id, data)
        }


def _int(params: dict[str, Any], name: str) -> int:
    value = params.get(name)
    if isinstance(value, bool) or value is None:
        raise BadRequest(f"field {name!r} must be an integer")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"field {name!r} must be an integer, got {value!r}") from None


def _float(params: dict[str, Any], name: str, default: float) -> float:
    try:
        return float(params.get(name, default))
    except (TypeError, ValueError):
        raise BadRequest(f"field {name!r} must be a number of seconds") from None


class _Server(localapi_http.QuietServer):
    daemon_threads = True  # a long poll must not hold up shutdown

    def __init__(self, address: tuple[str, int], handler: type[_Handler], chat: WebChat) -> None:
        self.chat = chat
        super().__init__(address, handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    # HTTP/1.0: one request per connection, so no idle keep-alive thread outlives stop().
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        if not self._host_ok():
            return
        url = urllib.parse.urlsplit(self.path)
        chat = self.server.chat
        if url.path == "/api/chat":
            self._call(chat.chat, dict(urllib.parse.parse_qsl(url.query)))
        elif url.path == "/api/wait":
            self._call(chat.wait, dict(urllib.parse.parse_qsl(url.query)))
        elif url.path == "/api/photo":
            self._photo(dict(urllib.parse.parse_qsl(url.query)))
        elif url.path in chat.files:
            self._file(chat.files[url.path])
        else:
            self._json(404, {"error": f"no such page {url.path!r}"})

    def do_POST(self) -> None:
        if not self._host_ok():
            return
        routes = {"/api/send": self.server.chat.send, "/api/tap": self.server.chat.tap}
        route = routes.get(urllib.parse.urlsplit(self.path).path)
        if route is None:
            known = "POST /api/send or /api/tap"
            self._json(404, {"error": f"no such endpoint {self.path!r}; {known}"})
            return
        try:
            params = self._body()
        except BadRequest as exc:
            self.close_connection = True  # the body may be unread
            self._json(400, {"error": str(exc)})
            return
        self._call(route, params)

    def _host_ok(self) -> bool:
        """Answer 403 to a request for another host name (DNS rebinding), else True."""
        try:
            localapi_http.check_host(self.headers.get("Host"), self.server.server_address[1])
        except localapi_http.Refused as exc:
            self.close_connection = True
            self._json(exc.status, {"error": exc.description})
            return False
        return True

    def _body(self) -> dict[str, Any]:
        # JSON only: another site's page cannot send it here without a CORS preflight,
        # which this server never grants, so only the demo page itself can act.
        if self.headers.get_content_type() != "application/json":
            raise BadRequest("send the fields as JSON (Content-Type: application/json)")
        try:
            length = localapi_http.content_length(self.headers, MAX_BODY)
        except localapi_http.Refused as exc:
            raise BadRequest(exc.description) from None
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            raise BadRequest("the body must be a JSON object") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def _call(self, route: Any, params: dict[str, Any]) -> None:
        try:
            self._json(200, route(params))
        except ValueError as exc:  # BadRequest, and the local server's checks (no such message)
            self._json(400, {"error": str(exc)})

    def _photo(self, params: dict[str, Any]) -> None:
        """The picture of a photo message in the chat (a chart), as the bot sent it."""
        chat = self.server.chat
        try:
            where = chat.where(params, chat.operator(params))
            found = chat.api.photo(where, _int(params, "message_id"))
        except BadRequest as exc:
            self._json(400, {"error": str(exc)})
            return
        if found is None:
            self._json(404, {"error": "no photo with that message_id in this chat"})
            return
        self._send(200, "image/png", found)

    def _file(self, static: StaticFile) -> None:
        self._send(200, static.content_type, static.read())

    def _json(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, "application/json", json.dumps(body).encode())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        with contextlib.suppress(OSError):  # the browser went away mid-answer
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            # The page loads nothing from elsewhere; say so, so a bug cannot make it.
            self.send_header(
                "Content-Security-Policy",
                "default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'",
            )
            self.end_headers()
            self.wfile.write(body)
