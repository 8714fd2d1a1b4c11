"""The demo's LLM: an OpenAI-compatible chat completions server on loopback that writes a
plausible post from the fenced title and text of its prompt, and reports token usage, so
the budget ledger, card costs and budget alerts work as they do with a paid provider.

    with demo_llm.DemoLLM(delay_s=1.0) as llm:
        settings = ProviderSettings(kind="openai", base_url=llm.base_url,
                                    api_key=demo_llm.API_KEY, model=demo_llm.MODEL)

Routes: POST /v1/chat/completions and /v1/messages (the reply's shape follows the route),
GET /v1/models. Requests are bounded (MAX_BODY) and answered on 127.0.0.1 only. The reply
builders below are also what the test suite's fake provider answers with.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
from typing import Any

from bot.demo import content
from pipelines.drafting import prompt as drafting

#: The key the demo's settings present, checked as a provider would, and the model.
API_KEY = content.API_KEY
MODEL = content.MODEL
#: A fixed creation time keeps replies deterministic.
CREATED = 1_700_000_000
#: The largest request body read (bytes); a demo prompt is a few KiB.
MAX_BODY = 1024 * 1024
#: Longest post the demo model writes from the story's text (characters).
SENTENCES_CHARS = 220

_OPENAI_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
_ANTHROPIC_PATHS = frozenset({"/v1/messages"})
_FENCED = re.compile(
    re.escape(drafting.UNTRUSTED_OPEN) + r"\n(.*?)\n" + re.escape(drafting.UNTRUSTED_CLOSE),
    re.DOTALL,
)


def user_text(body: Any) -> str:
    """The last message's text of a chat request ("" when it has none)."""
    try:
        content = body["messages"][-1]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else json.dumps(content)


def tokens(text: str) -> int:
    """Roughly four characters a token, as providers' own rules of thumb say."""
    return max(1, len(text) // 4)


def request_id_header(shape: str, n: int) -> dict[str, str]:
    # OpenAI names it x-request-id, Anthropic request-id.
    name = "x-request-id" if shape == "openai" else "request-id"
    return {name: f"req_fake_{n:06d}"}


def reply_body(shape: str, request: Any, text: str, n: int) -> dict[str, Any]:
    """A 200 body of `shape` ("openai" or "anthropic") answering `request` with `text`,
    with usage counted as `tokens` counts it."""
    model = request.get("model", "fake-model") if isinstance(request, dict) else "fake-model"
    system = request.get("system", "") if isinstance(request, dict) else ""
    input_tokens = (
        tokens(json.dumps(request.get("messages", [])) + str(system))
        if isinstance(request, dict)
        else 1
    )
    output_tokens = tokens(text)
    if shape == "anthropic":
        return {
            "id": f"msg_fake_{n:06d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }
    return {
        "id": f"chatcmpl-fake-{n:06d}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }


def write_post(prompt: str) -> str:
    """What the demo model answers: the first fenced field (the title) and the opening
    sentences of the second (the text), as a short post."""
    fields = [" ".join(found.split()) for found in _FENCED.findall(prompt)]
    if not fields:
        return "A short post about this item."
    title, text = fields[0], fields[1] if len(fields) > 1 else ""
    # A story that opens with its own headline (a page's heading kept in its text) must
    # not make the post say it twice, as a writer would not.
    if title and text.casefold().startswith(title.casefold()):
        text = text[len(title) :].lstrip(" .:-")
    sentences = re.split(r"(?<=[.!?])\s+", text)
    body = ""
    for sentence in sentences:
        if body and len(body) + len(sentence) > SENTENCES_CHARS:
            break
        body = f"{body} {sentence}".strip()
    return f"{title}: {body}" if body else title


#: Words that make an entry local news for the demo model's triage (whole words, any case).
LOCAL_WORDS = ("council", "library", "road", "street", "riverside", "market", "park", "school")
#: How a triage question's prompt begins (pipelines/config/triage.py).
TRIAGE_START = "Question:"


def answer(prompt: str) -> str:
    """A triage question's score and reason, or else a post."""
    return triage_answer(prompt) if prompt.startswith(TRIAGE_START) else write_post(prompt)


def triage_answer(prompt: str) -> str:
    """The demo model's stand-in for judgement: an entry naming a local place or service
    (LOCAL_WORDS) is local news, scored 0.9; any other scores 0.1."""
    entry = " ".join(_FENCED.findall(prompt)).lower()
    found = [word for word in LOCAL_WORDS if re.search(rf"\b{word}\b", entry)]
    if found:
        return json.dumps({"score": 0.9, "reason": f"local news: it mentions {found[0]}"})
    return json.dumps({"score": 0.1, "reason": "national news with nothing local in it"})


class DemoLLM:
    """The server in a daemon thread; a context manager."""

    def __init__(self, *, delay_s: float = 0.0) -> None:
        #: Seconds each completion waits before it answers (a model thinking), so a
        #: /budget sent meanwhile shows the call's hold.
        self.delay_s = delay_s
        self.calls = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> DemoLLM:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.llm = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.1,), name="demo-llm", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None and self._thread is not None
        self._stopping.set()  # a reply still waiting answers now
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (the client appends /chat/completions)."""
        assert self._server is not None, "use DemoLLM as a context manager"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def _count(self) -> int:
        with self._lock:
            self.calls += 1
            return self.calls


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # a tick's drafts connect together
    llm: DemoLLM


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the demo's terminal shows the banner, not access logs."""

    def do_GET(self) -> None:
        if self.path != "/v1/models":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
        elif not self._key_ok():
            self._send(401, {"error": {"message": "invalid API key"}})
        else:
            self._send(200, {"data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self) -> None:
        shape = (
            "openai"
            if self.path in _OPENAI_PATHS
            else "anthropic"
            if self.path in _ANTHROPIC_PATHS
            else None
        )
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if shape is None or not 0 < length <= MAX_BODY:
            self.close_connection = True
            problem = (
                f"send a JSON body of 1 to {MAX_BODY} bytes with its Content-Length"
                if shape
                else f"no route {self.path}; POST /v1/chat/completions or /v1/messages"
            )
            self._send(400 if shape else 404, {"error": {"message": problem}})
            return
        if not self._key_ok():
            self._send(401, {"error": {"message": "invalid API key"}})
            return
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            self._send(400, {"error": {"message": "the body must be JSON"}})
            return
        llm = self.server.llm
        n = llm._count()
        llm._stopping.wait(llm.delay_s)
        text = answer(user_text(body))
        limit = body.get("max_tokens") if isinstance(body, dict) else None
        if isinstance(limit, int) and limit > 0:
            text = text[: limit * 4]  # a model stops at max_tokens; `tokens` counts 4 a token
        self._send(200, reply_body(shape, body, text, n), request_id_header(shape, n))

    def _key_ok(self) -> bool:
        presented = self.headers.get("x-api-key") or self.headers.get("authorization") or ""
        return presented.removeprefix("Bearer ") == API_KEY

    def _send(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        payload = json.dumps(body).encode()
        with contextlib.suppress(OSError):  # the caller went away
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
