"""LLM provider clients: one `complete()` call with an honest account of what it may cost.

Use it like this:

    settings = providers.ProviderSettings(kind="openai", api_key=key, model="gpt-4o-mini")
    async with providers.ProviderClient(settings) as client:
        completion = await client.complete(system, prompt, max_tokens=800)

The budget ledger holds the worst case before the call and settles after, so every
outcome says whether the provider may have charged for it:

- `Completion`: the reply and its token usage. Either count is None when the
  provider did not report it; the cost is then unknown and must be settled as
  uncertain. `uncertain_attempts` counts earlier attempts that got a 5xx from a
  provider whose settings say it bills errors (`bills_errors`).
- `ProviderNotCalled` and its subclasses `ProviderRejected` and `ProviderErrorAnswer`:
  no generation ran and nothing was charged; the hold can be released.
- `ProviderErrorAnswer`: the provider answered with an HTTP error (a status and an
  error body: 5xx, 408, 409, 429) after its retries. Such an answer carries no usage,
  and the synchronous APIs gatehouse speaks do not bill one, so nothing was charged
  and the same call may succeed later. For a provider that says it bills errors
  (`bills_errors: true`), a 5xx is `ProviderUncertain` instead.
- `ProviderUncertain`: the request reached the provider and may have been charged: no
  reply within the timeout after sending, a connection lost mid-reply.
- `ProviderBadOutput`: the provider answered 2xx with an unusable body; it was
  charged. `raw_text` holds the body for the operator.
- `ProviderTooLarge`: the provider answered 2xx with a body larger than
  `max_reply_bytes` (on the wire or decompressed), read no further; it was charged,
  and the usage in the body is unknown.

A reply is read as the sources read an answer (pipelines/sources/common.py
`read_bounded`): streamed, gzip or deflate inflated a chunk at a time, never held past
`max_reply_bytes`.

Retries: connect failures, 408, 409, 429 and 5xx, with exponential backoff and full
jitter, honouring `retry-after-ms` and `retry-after`, bounded by `max_retries` and by
`max_retry_wait_s` of total waiting. A read timeout or a connection dropped
mid-response is not retried: the generation may still run and be billed, and a
second call could spend past the one hold the ledger took.

Turns: a caller holds a turn (`async with client.turn(max_tokens):`) while it drafts.
How many at once follows what the provider says on every answer, never above
`max_concurrent_calls`, the ceiling (pipelines/providers/pace.py); the HTTP pool keeps
that many connections, all reused. A drafter takes its turn before it holds any
budget, so a claim's lease starts when its call may go; the others wait for a turn,
not in the HTTP pool, whose bookkeeping on the event loop grows with every request
queued in it times its connections. While a 429 pauses the model, an attempt waits
for the pause within `max_retry_wait_s`, or is not made.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipelines.ground import retry
from pipelines.providers import pace, wire
from pipelines.providers.outcomes import (
    Completion,
    ProviderBadOutput,
    ProviderError,
    ProviderErrorAnswer,
    ProviderNotCalled,
    ProviderRejected,
    ProviderTooLarge,
    ProviderUncertain,
)
from pipelines.providers.settings import DEFAULT_BASE_URLS as DEFAULT_BASE_URLS
from pipelines.providers.settings import ProviderSettings as ProviderSettings

#: The outcomes live in pipelines/providers/outcomes.py; callers name them providers.X.
__all__ = [
    "DEFAULT_BASE_URLS",
    "Completion",
    "ProviderBadOutput",
    "ProviderClient",
    "ProviderError",
    "ProviderErrorAnswer",
    "ProviderNotCalled",
    "ProviderRejected",
    "ProviderSettings",
    "ProviderTooLarge",
    "ProviderUncertain",
    "retry_delay",
]

# Imported where used: the settings import this module, and the CLI must start quickly.
if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

#: First backoff ceiling in seconds; doubles per retry (0.5, 1, 2, 4, 8).
BACKOFF_BASE_S = 0.5
#: Backoff ceiling; a provider that wants longer says so in retry-after.
BACKOFF_CAP_S = 8.0
#: Sent but refused before generation: a timeout waiting for the body, a conflict, a rate limit.
RETRYABLE_NOT_CHARGED = frozenset({408, 409, 429})


def retry_delay(
    attempt: int, headers: Mapping[str, str], rng: random.Random, *, now: datetime
) -> float:
    """Seconds to wait before retry number `attempt` (1 for the first retry).

    The server's `retry-after-ms` wins, then `retry-after` (seconds or an HTTP date,
    measured from `now`); otherwise exponential backoff with full jitter.
    """
    wanted = retry.retry_after_s(headers, now)
    if wanted is not None:
        return wanted
    return rng.uniform(0, retry.backoff_s(attempt, BACKOFF_BASE_S, BACKOFF_CAP_S))


@dataclass(frozen=True)
class _Failure:
    """One attempt that did not produce a Completion, and what to raise if it is the last."""

    reason: str
    error: type[ProviderError]
    retryable: bool
    status: int | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    request_id: str | None = None
    raw_text: str = ""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ProviderClient:
    """Calls one provider and model; see the module docstring for what each outcome means."""

    def __init__(
        self,
        settings: ProviderSettings,
        client: httpx.AsyncClient | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        import httpx

        from pipelines.ground import httpclient

        self.settings = settings
        self._timeout = httpx.Timeout(settings.timeout_s, connect=settings.connect_timeout_s)
        self._owns_client = client is None
        turns = settings.max_concurrent_calls
        self.pace = pace.Pacer(settings.model, ceiling=turns)
        if client is None:
            limits = httpx.Limits(max_connections=turns, max_keepalive_connections=turns)
            client = httpclient.new(timeout=self._timeout, limits=limits)
        self._client = client
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._now = now
        self._host = httpx.URL(settings.base_url).host

    async def __aenter__(self) -> ProviderClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this object created it; its pace is no longer shown."""
        self.pace.close()
        if self._owns_client:
            await self._client.aclose()

    def turn(self, max_tokens: int = 0) -> AbstractAsyncContextManager[None]:
        """Held while a draft of up to `max_tokens` is made, at the model's pace."""
        return self.pace.turn(max_tokens)

    async def complete(
        self, system: str, prompt: str, *, max_tokens: int, json_output: bool = False
    ) -> Completion:
        """Ask the model once (retrying only where that cannot double the charge)."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens}")
        request = wire.build_request(
            self.settings, system, prompt, max_tokens=max_tokens, json_output=json_output
        )
        waited = await self._pause()  # later attempts follow their own retry-after
        uncertain = 0
        attempt = 0
        while True:
            attempt += 1
            outcome = await self._attempt(request)
            if isinstance(outcome, Completion):
                return dataclasses.replace(outcome, attempts=attempt, uncertain_attempts=uncertain)
            stop, delay = self._stop_or_delay(outcome, attempt, waited)
            if stop is not None:
                raise self._error(outcome, stop, attempt, uncertain)
            if outcome.error is ProviderUncertain:
                uncertain += 1
            log.warning("%s; retry %d in %.2fs", self._describe(outcome.reason), attempt, delay)
            await self._sleep(delay)
            waited += delay

    async def _pause(self) -> float:
        """Wait out a pause that a 429 of another call began since this one got its turn."""
        paused = self.pace.paused_for()
        if paused > self.settings.max_retry_wait_s:
            raise ProviderErrorAnswer(  # nothing sent: nothing charged
                self._describe(f"rate limited: paused {paused:.2f}s, past the retry budget"),
                status=429,
                attempts=0,
            )
        if paused:
            await self._sleep(paused)
        return paused

    def _stop_or_delay(
        self, failure: _Failure, attempt: int, waited: float
    ) -> tuple[str | None, float]:
        """Why to stop now, or None and how long to wait before the next attempt."""
        if not failure.retryable:
            return "", 0.0
        if attempt > self.settings.max_retries:
            return f"gave up after {attempt} attempts", 0.0
        delay = retry_delay(attempt, failure.headers, self._rng, now=self._now())
        budget = self.settings.max_retry_wait_s
        if waited + delay > budget:
            return (
                f"gave up after {attempt} attempts: waiting {delay:.2f}s more "
                f"would pass the {budget:g}s retry budget",
                0.0,
            )
        return None, delay

    def _error(self, failure: _Failure, stop: str, attempts: int, uncertain: int) -> ProviderError:
        """The error to raise; one attempt that may have been charged makes the call uncertain."""
        parts = [failure.reason]
        if stop:
            parts.append(stop)
        if uncertain:
            parts.append(
                f"{uncertain} earlier attempt(s) got a 5xx from a provider that bills errors"
            )
        message = self._describe("; ".join(parts))
        common: dict[str, Any] = {
            "status": failure.status,
            "attempts": attempts,
            "request_id": failure.request_id,
        }
        if failure.error is ProviderBadOutput:
            return ProviderBadOutput(message, raw_text=failure.raw_text, **common)
        if failure.error is ProviderTooLarge:
            return ProviderTooLarge(message, **common)
        if uncertain:
            return ProviderUncertain(message, **common)
        return failure.error(message, **common)

    async def _attempt(self, request: wire.WireRequest) -> Completion | _Failure:
        import httpx

        from pipelines.sources import common  # the sources' bounded read

        headers = {**request.headers, "Accept-Encoding": common.ACCEPT_ENCODING}
        try:
            async with self._client.stream(
                "POST", request.url, headers=headers, json=request.body, timeout=self._timeout
            ) as response:
                return await self._judge(response)
        except (
            httpx.ConnectError,
            httpx.ConnectTimeout,
            httpx.PoolTimeout,
            httpx.ProxyError,
        ) as exc:
            # Nothing left this process: the connection never opened.
            return _Failure(
                f"could not connect to {self._host}: {self._exc_text(exc)}", ProviderNotCalled, True
            )
        except httpx.UnsupportedProtocol as exc:
            return _Failure(
                f"cannot call {self._host}: {self._exc_text(exc)}", ProviderNotCalled, False
            )
        except httpx.TimeoutException:
            return _Failure(
                f"no reply from {self._host} within {self.settings.timeout_s:g}s after sending",
                ProviderUncertain,
                False,
            )
        except httpx.RequestError as exc:
            return _Failure(
                f"connection to {self._host} failed after sending: {self._exc_text(exc)}",
                ProviderUncertain,
                False,
            )

    async def _judge(self, response: httpx.Response) -> Completion | _Failure:
        status = response.status_code
        self.pace.heard(status, response.headers, self._now())
        request_id = response.headers.get("x-request-id") or response.headers.get("request-id")
        text = await self._body(response, request_id)
        if isinstance(text, _Failure):
            return text
        if 200 <= status < 300:
            return self._parse(text, request_id, status)
        reason = f"HTTP {status} from {self._host}: {self._summary(text)}"
        if status in RETRYABLE_NOT_CHARGED:
            error: type[ProviderError] = ProviderErrorAnswer
        elif status >= 500:
            error = ProviderUncertain if self.settings.bills_errors else ProviderErrorAnswer
        else:
            return _Failure(reason, ProviderRejected, False, status, response.headers, request_id)
        return _Failure(reason, error, True, status, response.headers, request_id)

    async def _body(self, response: httpx.Response, request_id: str | None) -> str | _Failure:
        """The reply's text, read within max_reply_bytes; past that (or in an encoding it
        cannot read), a 2xx is a failure and an error status is judged without its body."""
        from pipelines.sources import base, common

        cap = self.settings.max_reply_bytes
        status = response.status_code
        try:
            content = await common.read_bounded(
                response, common.Limits(cap, cap), f"POST {self._host}"
            )
        except common.TooLarge:
            why = f"a reply larger than max_reply_bytes ({cap} bytes), not read"
            error: type[ProviderError] = ProviderTooLarge
        except base.SourceError as exc:
            why, error = f"a body it cannot read: {exc}", ProviderBadOutput
        else:
            return content.decode("utf-8", "replace")
        if not 200 <= status < 300:
            return ""
        reason = f"HTTP {status} from {self._host} with {why}"
        return _Failure(reason, error, False, status, request_id=request_id)

    def _parse(self, text: str, request_id: str | None, status: int) -> Completion | _Failure:
        try:
            body = json.loads(text)
            reply = wire.parse_reply(self.settings.kind, body, self.settings.model)
        except (ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError
            # Besides JSONDecodeError: an integer past int_max_str_digits is a plain
            # ValueError, and JSON nested past the recursion limit a RecursionError.
            if isinstance(exc, json.JSONDecodeError):
                what = "not JSON"
            elif isinstance(exc, RecursionError):
                what = "JSON nested too deeply"
            else:
                what = self._scrub(str(exc)[: wire.ERROR_DETAIL_CHARS])
            raw = self._scrub(text)
            return _Failure(
                f"HTTP {status} from {self._host} but the body is unusable: {what}",
                ProviderBadOutput,
                False,
                status,
                request_id=request_id,
                raw_text=raw,
            )
        return Completion(
            text=reply.text,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            model=reply.model,
            request_id=request_id or reply.body_id,
            raw=body,
        )

    def _describe(self, reason: str) -> str:
        return f"{self.settings.kind} {self.settings.model}: {reason}"

    def _summary(self, text: str) -> str:
        """An error body as evidence: its message, bounded, with no secret in it."""
        from pipelines.text import redaction

        return redaction.redact(self._scrub(wire.error_detail(text)))

    def _exc_text(self, exc: Exception) -> str:
        # httpx messages carry no headers, but a base_url may embed a credential; scrub anyway.
        return self._scrub(str(exc) or type(exc).__name__)

    def _scrub(self, text: str) -> str:
        key = self.settings.api_key.get_secret_value()
        return text.replace(key, "***") if key else text
