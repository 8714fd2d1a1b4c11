"""The HTTP trigger: other systems start runs and hand over items.

    GATEHOUSE_API__LISTEN=127.0.0.1:8080            # off when unset
    gatehouse token create ci                        # prints the token once

    POST /v1/pipelines/{name}/runs    (Authorization: Bearer <token>)
    POST /v1/pipelines/{name}/items   {"id": ..., "title": ..., "text": ..., "link": ...}
    GET  /v1/openapi.json             the description of both (no token needed)

An `Idempotency-Key` header makes a retry return the first answer; the same key with
another request is 409. Bodies are JSON objects of at most MAX_BODY_BYTES, validated
field by field; every refusal is a 4xx whose `error` says what was wrong and what is
valid. Each token may make GATEHOUSE_API__REQUESTS_PER_MINUTE requests a minute; more
are 429 with Retry-After. The work itself is pipelines/runs/trigger.py; the listener's bounds
are bot/web/listen.py.
Tokens appear in no log line: tornado logs the request line, never headers.
"""

from __future__ import annotations

import asyncio
import hashlib
import http
import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import pydantic
from aiolimiter import AsyncLimiter
from tornado import web

from bot.web import listen
from pipelines.config import file_errors
from pipelines.runs import trigger
from pipelines.service import seams
from store import errors
from store.intake import tokens

log = logging.getLogger(__name__)

#: The largest request body (bytes): an item's 50,000 characters of text, JSON-escaped.
MAX_BODY_BYTES = 256 * 1024
#: Seconds one request may take once its body is in (a store write behind others).
REQUEST_TIMEOUT_S = 10.0
#: What an Idempotency-Key may be: printable ASCII, 1 to 200 characters.
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
#: The longest Authorization header looked at (characters); a token is 48.
MAX_AUTH_CHARS = 256
SPEC_PATH = Path(__file__).with_name("openapi.json")


class Refused(Exception):
    """A request refused with an HTTP status and a message for the caller."""

    def __init__(self, status: int, message: str, **headers: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


class TokenLimits:
    """Each token's own bucket (aiolimiter's leaky bucket): a caller stuck in a loop is
    answered 429 with Retry-After past its rate, and other tokens are not held up by it.
    The buckets live in memory (a restart refills them), one per live token."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._buckets: dict[int, AsyncLimiter] = {}

    async def take(self, token: tokens.Token) -> None:
        bucket = self._buckets.setdefault(token.id, AsyncLimiter(self.per_minute, 60))
        if not bucket.has_capacity():
            wait = math.ceil(60 / self.per_minute)  # one request's worth drains by then
            raise Refused(
                429,
                f"token {token.name!r} may make {self.per_minute} requests a minute "
                f"(GATEHOUSE_API__REQUESTS_PER_MINUTE); retry in {wait} s",
                Retry_After=str(wait),
            )
        await bucket.acquire()  # at once: the bucket has room


def make_app(runtime: seams.Piped, limits: TokenLimits) -> web.Application:
    handled = {"runtime": runtime, "limits": limits}
    return web.Application(
        [
            (r"/v1/pipelines/([^/]+)/runs", Runs, handled),
            (r"/v1/pipelines/([^/]+)/items", Items, handled),
            (r"/v1/openapi\.json", Spec),
        ],
        default_handler_class=NotFoundHandler,
        log_function=listen.access_log,
    )


def worker(address: str, per_minute: int) -> listen.Worker[seams.Piped]:
    """The trigger on `address`; each token may make `per_minute` requests a minute."""
    limits = TokenLimits(per_minute)
    return listen.worker("api", address, lambda runtime: make_app(runtime, limits))


class JsonHandler(web.RequestHandler):
    """JSON answers, and every error as {"error": "..."}."""

    def set_default_headers(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")

    def answer(self, status: int, body: dict[str, Any]) -> None:
        self.set_status(status)
        self.finish(json.dumps(body))

    def refuse(self, exc: Refused) -> None:
        for name, value in exc.headers.items():
            self.set_header(name.replace("_", "-"), value)
        self.answer(exc.status, {"error": exc.message})

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Tornado's own refusals (a wrong method, a malformed request) in the same shape."""
        self.finish(json.dumps({"error": http.HTTPStatus(status_code).phrase}))


class NotFoundHandler(JsonHandler):
    def prepare(self) -> None:
        self.answer(404, {"error": "no such path; see GET /v1/openapi.json"})


class Spec(JsonHandler):
    def get(self) -> None:
        self.finish(SPEC_PATH.read_bytes())


@web.stream_request_body
class Trigger(JsonHandler):
    """A POST with a bounded JSON body from a live token's caller."""

    def initialize(self, runtime: seams.Piped, limits: TokenLimits) -> None:
        self.runtime = runtime
        self.limits = limits
        self.body_parts: list[bytes] = []
        self.received = 0
        self.refused: Refused | None = None
        self.token: tokens.Token | None = None

    async def prepare(self) -> None:
        """Headers only, before any of the body is read: a stranger's body never is."""
        try:
            if listen.too_many_headers(self):
                raise Refused(431, f"at most {listen.MAX_HEADERS} headers")
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                self.token = await self.caller()
            await self.limits.take(self.token)
            length = self.request.headers.get("Content-Length")
            if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
                raise Refused(413, f"the body may be at most {MAX_BODY_BYTES} bytes")
        except Refused as exc:
            self.refuse(exc)
        except (TimeoutError, errors.StoreError):
            self.refuse(Refused(503, "the store did not answer in time; retry"))

    def data_received(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > MAX_BODY_BYTES:  # a chunked body past the cap: stop reading it
            self.refused = Refused(413, f"the body may be at most {MAX_BODY_BYTES} bytes")
            self.body_parts.clear()
            return
        self.body_parts.append(chunk)

    async def post(self, name: str) -> None:
        try:
            if self.refused is not None:
                raise self.refused
            assert self.token is not None, "prepare() authenticated the caller"
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                body, key = self.json_body(), self.idempotency_key()
                answer = await self.handle(self.token, name, body, key)
            self.answer(answer.status, answer.body)
        except Refused as exc:
            self.refuse(exc)
        except trigger.Conflict as exc:
            self.refuse(Refused(409, str(exc)))
        except errors.NotFound as exc:
            self.refuse(Refused(404, str(exc)))
        except TimeoutError:
            self.refuse(Refused(503, "the store did not answer in time; retry with the same key"))
        except errors.StoreError as exc:
            log.warning("trigger %s: the store failed: %s", self.request.path, exc)
            self.refuse(Refused(503, "the store cannot write now; retry with the same key"))

    async def caller(self) -> tokens.Token:
        header = self.request.headers.get("Authorization", "")[:MAX_AUTH_CHARS]
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Refused(
                401,
                "send Authorization: Bearer <token> (gatehouse token create <name>)",
                WWW_Authenticate="Bearer",
            )
        found = await tokens.authenticate(self.runtime.store, token.strip())
        if found is None:
            raise Refused(401, "unknown or revoked token", WWW_Authenticate="Bearer")
        return found

    def idempotency_key(self) -> str | None:
        key = self.request.headers.get("Idempotency-Key")
        if key is not None and not IDEMPOTENCY_KEY.match(key):
            raise Refused(400, "Idempotency-Key must be 1 to 200 printable ASCII characters")
        return key

    def json_body(self) -> dict[str, Any] | None:
        raw = b"".join(self.body_parts)
        if not raw.strip():
            return None
        media = self.request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if media != "application/json":
            raise Refused(415, f"send the body as application/json, not {media or 'untyped'}")
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise Refused(400, f"the body is not valid JSON: {str(exc)[:200]}") from None
        if not isinstance(body, dict):
            raise Refused(422, "the body must be a JSON object")
        return body

    def request_hash(self, body: dict[str, Any] | None) -> str:
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(f"{self.request.path}\n{canonical}".encode()).hexdigest()

    async def handle(
        self, caller: tokens.Token, name: str, body: dict[str, Any] | None, key: str | None
    ) -> tokens.Answer:
        raise NotImplementedError


class Runs(Trigger):
    async def handle(
        self, caller: tokens.Token, name: str, body: dict[str, Any] | None, key: str | None
    ) -> tokens.Answer:
        if body:
            raise Refused(422, f"a run takes no fields; got {', '.join(sorted(body))[:200]}")
        rt = self.runtime
        request = trigger.Request(caller, key, self.request_hash(None), rt.now())
        return await trigger.request_run(rt.store, rt.pipelines, request, name)


class Items(Trigger):
    async def handle(
        self, caller: tokens.Token, name: str, body: dict[str, Any] | None, key: str | None
    ) -> tokens.Answer:
        if body is None:
            raise Refused(422, "send the item as a JSON object: id, title, text, link")
        try:
            item = trigger.ItemIn.model_validate(body)
        except pydantic.ValidationError as exc:
            raise Refused(422, _invalid(exc)) from None
        rt = self.runtime
        request = trigger.Request(caller, key, self.request_hash(body), rt.now())
        try:
            return await trigger.hand_over(rt.store, rt.pipelines, request, name, item)
        except ValueError as exc:
            raise Refused(422, str(exc)) from None


def _invalid(exc: pydantic.ValidationError) -> str:
    """Each field's problem in the project's words: `title: must have at least 1 character`."""
    parts = []
    for error in exc.errors(include_input=False)[:10]:
        where = ".".join(str(part) for part in error["loc"]) or "body"
        parts.append(f"{where}: {file_errors.plain(error)}")
    return "; ".join(parts) + " (fields: id and title required, text and link optional)"
