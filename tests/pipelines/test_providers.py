"""Provider clients against the fake LLM server over real sockets, plus the pure retry policy."""

from __future__ import annotations

import random
import re
import socket
import traceback
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from pipelines.providers import client as providers
from pipelines.providers import wire
from tests.fakes.llm_server import FakeLLM

KEY = "sk-test-SECRET-0123456789abcdef"
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
PROMPT = "Summarise the quarterly report on widget sales in the northern region for the board."


class Sleeps:
    """A sleep hook that records what it was asked and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


class MaxRandom(random.Random):
    """Full jitter at its ceiling, so backoff values are exact."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


@pytest.fixture
def claude() -> Iterator[FakeLLM]:
    with FakeLLM(kind="anthropic") as fake:
        yield fake


def settings(base_url: str, kind: str = "openai", **overrides: Any) -> providers.ProviderSettings:
    fields: dict[str, Any] = {"kind": kind, "base_url": base_url, "api_key": KEY, "model": "m-1"}
    return providers.ProviderSettings(**(fields | overrides))


def client(
    fake: FakeLLM, sleeps: Sleeps | None = None, **overrides: Any
) -> providers.ProviderClient:
    return providers.ProviderClient(
        settings(fake.base_url, fake.kind, **overrides),
        sleep=sleeps or Sleeps(),
        rng=random.Random(7),
        now=lambda: NOW,
    )


async def failure(
    fake: FakeLLM, sleeps: Sleeps | None = None, **overrides: Any
) -> providers.ProviderError:
    async with client(fake, sleeps, **overrides) as provider:
        with pytest.raises(providers.ProviderError) as caught:
            await provider.complete("sys", PROMPT, max_tokens=100)
    return caught.value


def closed_port() -> int:
    """A loopback port nobody listens on: bound, then released."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def assert_no_key(exc: BaseException) -> None:
    everything = "".join(traceback.format_exception(exc)) + repr(exc)
    assert KEY not in everything
    assert KEY not in getattr(exc, "raw_text", "")


# -- happy paths -------------------------------------------------------------------


async def test_openai_shape_sends_bearer_key_and_reads_text_usage_and_request_id(
    llm: FakeLLM,
) -> None:
    async with client(llm) as provider:
        done = await provider.complete("You draft replies.", PROMPT, max_tokens=100)

    assert done.text == "DRAFT: " + PROMPT[:60]
    assert done.input_tokens == done.raw["usage"]["prompt_tokens"] > 0
    assert done.output_tokens == done.raw["usage"]["completion_tokens"] > 0
    assert done.usage_known
    assert done.request_id == "req_fake_000001"
    assert (done.model, done.attempts, done.uncertain_attempts) == ("m-1", 1, 0)
    [seen] = llm.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.body["messages"] == [
        {"role": "system", "content": "You draft replies."},
        {"role": "user", "content": PROMPT},
    ]
    assert seen.body["max_tokens"] == 100
    assert "response_format" not in seen.body


async def test_anthropic_shape_sends_version_and_system_and_reads_content_blocks(
    claude: FakeLLM,
) -> None:
    async with client(claude) as provider:
        done = await provider.complete("You draft replies.", PROMPT, max_tokens=50)

    assert done.text == "DRAFT: " + PROMPT[:60]
    assert done.input_tokens == done.raw["usage"]["input_tokens"] > 0
    assert done.output_tokens == done.raw["usage"]["output_tokens"] > 0
    assert done.request_id == "req_fake_000001"
    [seen] = claude.requests
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.body["system"] == "You draft replies."
    assert seen.body["messages"] == [{"role": "user", "content": PROMPT}]
    assert seen.body["max_tokens"] == 50


async def test_json_output_asks_each_shape_in_its_own_way(llm: FakeLLM, claude: FakeLLM) -> None:
    for fake in (llm, claude):
        fake.queue_reply('{"title": "Q3"}')
        async with client(fake) as provider:
            done = await provider.complete("sys", PROMPT, max_tokens=100, json_output=True)
        assert done.text == '{"title": "Q3"}'
    assert llm.requests[0].body["response_format"] == {"type": "json_object"}
    assert wire.ANTHROPIC_JSON_INSTRUCTION in claude.requests[0].body["system"]


async def test_openai_compatible_server_without_v1_prefix(llm: FakeLLM) -> None:
    base = f"http://127.0.0.1:{llm.port}/"  # e.g. a proxy that mounts the API at the root
    async with providers.ProviderClient(settings(base), sleep=Sleeps()) as provider:
        done = await provider.complete("", PROMPT, max_tokens=10)
    assert done.text.startswith("DRAFT: ")
    assert llm.requests[0].path == "/chat/completions"
    assert llm.requests[0].body["messages"] == [{"role": "user", "content": PROMPT}]


async def test_a_caller_owned_httpx_client_is_used_and_left_open(llm: FakeLLM) -> None:
    async with httpx.AsyncClient() as http:
        provider = providers.ProviderClient(settings(llm.base_url), http)
        await provider.complete("sys", PROMPT, max_tokens=10)
        await provider.aclose()
        assert not http.is_closed
    assert llm.calls == 1


async def test_missing_usage_gives_a_completion_with_unknown_cost(llm: FakeLLM) -> None:
    """Usage absent is not an error: the text is good, the ledger must settle as uncertain."""
    llm.queue_fault("missing_usage")
    async with client(llm) as provider:
        done = await provider.complete("sys", PROMPT, max_tokens=10)
    assert done.text == "DRAFT: " + PROMPT[:60]
    assert (done.input_tokens, done.output_tokens) == (None, None)
    assert not done.usage_known


# -- retries -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_429_with_retry_after_waits_that_long_then_succeeds(kind: str) -> None:
    sleeps = Sleeps()
    with FakeLLM(kind=kind) as fake:
        fake.queue_fault("429", retry_after=1)
        async with client(fake, sleeps) as provider:
            done = await provider.complete("sys", PROMPT, max_tokens=10)
        assert fake.calls == 2
    assert sleeps.calls == [1.0]
    assert (done.attempts, done.uncertain_attempts) == (2, 0)
    assert done.request_id == "req_fake_000002"


async def test_retry_after_ms_wins_over_retry_after(llm: FakeLLM) -> None:
    sleeps = Sleeps()
    llm.queue_fault("429", retry_after=30, retry_after_ms=250)
    async with client(llm, sleeps) as provider:
        await provider.complete("sys", PROMPT, max_tokens=10)
    assert sleeps.calls == [0.25]


@pytest.mark.parametrize(("bills_errors", "uncertain"), [(False, 0), (True, 1)])
async def test_500_is_retried_and_counts_as_uncertain_only_where_errors_are_billed(
    llm: FakeLLM, bills_errors: bool, uncertain: int
) -> None:
    sleeps = Sleeps()
    llm.queue_fault("500")
    async with client(llm, sleeps, bills_errors=bills_errors) as provider:
        done = await provider.complete("sys", PROMPT, max_tokens=10)
    assert llm.calls == 2
    assert (done.attempts, done.uncertain_attempts) == (2, uncertain)
    [waited] = sleeps.calls
    assert 0 <= waited <= providers.BACKOFF_BASE_S


@pytest.mark.parametrize(
    ("bills_errors", "expected"),
    [(False, providers.ProviderErrorAnswer), (True, providers.ProviderUncertain)],
)
async def test_500_until_retries_run_out_is_an_error_answer_unless_errors_are_billed(
    claude: FakeLLM, bills_errors: bool, expected: type[providers.ProviderError]
) -> None:
    sleeps = Sleeps()
    for _ in range(3):
        claude.queue_fault("529")
    exc = await failure(claude, sleeps, max_retries=2, bills_errors=bills_errors)
    assert type(exc) is expected
    assert (exc.status, exc.attempts, claude.calls) == (529, 3, 3)
    assert len(sleeps.calls) == 2
    assert "gave up after 3 attempts" in str(exc)


async def test_429_until_retries_run_out_was_never_charged(llm: FakeLLM) -> None:
    for _ in range(3):
        llm.queue_fault("429", retry_after=0)
    exc = await failure(llm, max_retries=2)
    assert type(exc) is providers.ProviderErrorAnswer
    assert isinstance(exc, providers.ProviderNotCalled)
    assert (exc.status, llm.calls) == (429, 3)


async def test_a_rejection_after_a_500_is_uncertain_where_errors_are_billed(
    llm: FakeLLM,
) -> None:
    """There the 500 may have been charged, so the whole call may have been."""
    llm.queue_fault("500")
    llm.queue_fault("400")
    exc = await failure(llm, bills_errors=True)
    assert type(exc) is providers.ProviderUncertain
    assert "1 earlier attempt(s)" in str(exc)
    assert llm.calls == 2
    llm.queue_fault("500")
    llm.queue_fault("400")
    assert type(await failure(llm)) is providers.ProviderRejected  # the default: not billed


async def test_retry_after_beyond_the_budget_stops_at_once(llm: FakeLLM) -> None:
    sleeps = Sleeps()
    llm.queue_fault("429", retry_after=30)
    exc = await failure(llm, sleeps, max_retry_wait_s=5)
    assert type(exc) is providers.ProviderErrorAnswer
    assert "retry budget" in str(exc)
    assert (llm.calls, sleeps.calls) == (1, [])


async def test_real_sleep_wiring_with_a_short_retry_after(llm: FakeLLM) -> None:
    llm.queue_fault("503", retry_after_ms=50)
    async with providers.ProviderClient(settings(llm.base_url)) as provider:
        done = await provider.complete("sys", PROMPT, max_tokens=10)
    assert (done.attempts, llm.calls) == (2, 2)


# -- failures ----------------------------------------------------------------------


async def test_read_timeout_is_uncertain_and_not_retried(llm: FakeLLM) -> None:
    llm.queue_fault("timeout", hold_s=10)
    exc = await failure(llm, timeout_s=0.3)
    assert type(exc) is providers.ProviderUncertain
    assert "no reply" in str(exc)
    assert llm.calls == 1


async def test_connection_dropped_mid_body_is_uncertain_and_not_retried(claude: FakeLLM) -> None:
    claude.queue_fault("drop")
    exc = await failure(claude)
    assert type(exc) is providers.ProviderUncertain
    assert claude.calls == 1


async def test_connection_refused_is_not_called_after_retries() -> None:
    sleeps = Sleeps()
    provider = providers.ProviderClient(
        settings(f"http://127.0.0.1:{closed_port()}/v1"), sleep=sleeps
    )
    async with provider:
        with pytest.raises(providers.ProviderNotCalled) as caught:
            await provider.complete("sys", PROMPT, max_tokens=10)
    assert type(caught.value) is providers.ProviderNotCalled
    assert "could not connect to 127.0.0.1" in str(caught.value)
    assert len(sleeps.calls) == 4  # max_retries
    assert_no_key(caught.value)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_wrong_key_is_rejected_once_and_the_echoed_key_is_scrubbed(kind: str) -> None:
    sleeps = Sleeps()
    with FakeLLM(kind=kind, api_key="the-right-key") as fake:
        exc = await failure(fake, sleeps)
        assert fake.calls == 1
    assert isinstance(exc, providers.ProviderRejected)
    assert isinstance(exc, providers.ProviderNotCalled)  # a 401 runs no generation
    assert exc.status == 401
    assert "Incorrect API key provided: ***" in str(exc)
    assert sleeps.calls == []
    assert_no_key(exc)


async def test_malformed_body_is_bad_output_carrying_the_raw_text(llm: FakeLLM) -> None:
    llm.queue_fault("malformed")
    exc = await failure(llm)
    assert isinstance(exc, providers.ProviderBadOutput)
    assert "not JSON" in str(exc)
    assert exc.raw_text.startswith("<html>upstream hiccup")
    assert llm.calls == 1  # a 200 was charged: never call twice


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("401", providers.ProviderRejected),
        ("404", providers.ProviderRejected),
        ("500", providers.ProviderErrorAnswer),
        ("429", providers.ProviderErrorAnswer),
        ("timeout", providers.ProviderUncertain),
        ("drop", providers.ProviderUncertain),
        ("malformed", providers.ProviderBadOutput),
    ],
)
@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_no_error_path_shows_the_key(
    kind: str, fault: str, expected: type[providers.ProviderError]
) -> None:
    with FakeLLM(kind=kind) as fake:
        for _ in range(5):
            fake.queue_fault(fault, retry_after=0, hold_s=10)
        exc = await failure(fake, timeout_s=0.3)
    assert type(exc) is expected
    assert_no_key(exc)


# -- settings ----------------------------------------------------------------------


def test_settings_default_to_each_providers_own_host_and_hide_the_key() -> None:
    openai = providers.ProviderSettings(kind="openai", api_key=SecretStr(KEY), model="m")
    anthropic = providers.ProviderSettings(kind="anthropic", api_key=SecretStr(KEY), model="m")
    assert openai.base_url == "https://api.openai.com/v1"
    assert anthropic.base_url == "https://api.anthropic.com"
    assert KEY not in repr(openai) + str(openai)


def test_settings_reject_a_base_url_without_scheme_saying_what_is_valid() -> None:
    with pytest.raises(ValidationError) as caught:
        settings("localhost:11434/v1")
    assert "must start with http:// or https://" in str(caught.value)
    assert KEY not in str(caught.value)


async def test_max_tokens_must_be_positive(llm: FakeLLM) -> None:
    async with client(llm) as provider:
        with pytest.raises(ValueError, match="max_tokens must be a positive integer, got 0"):
            await provider.complete("sys", PROMPT, max_tokens=0)
    assert llm.calls == 0


# -- pure logic --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "headers", "expected"),
    [
        (1, {"retry-after-ms": "250"}, 0.25),
        (1, {"retry-after": "3"}, 3.0),
        (1, {"Retry-After": "1.5"}, 1.5),
        (1, {"retry-after": "30", "retry-after-ms": "100"}, 0.1),
        (1, {"retry-after": format_datetime(NOW + timedelta(seconds=10), usegmt=True)}, 10.0),
        (1, {"retry-after": format_datetime(NOW - timedelta(seconds=10), usegmt=True)}, 0.0),
        (1, {"retry-after": "0"}, 0.0),
        (1, {"retry-after": "soon"}, 0.5),  # unreadable: backoff
        (1, {"retry-after": "-1"}, 0.5),
        (1, {"retry-after-ms": "nan"}, 0.5),
        (1, {}, 0.5),
        (2, {}, 1.0),
        (3, {}, 2.0),
        (4, {}, 4.0),
        (5, {}, 8.0),
        (9, {}, 8.0),  # capped
    ],
)
def test_retry_delay_table(attempt: int, headers: dict[str, str], expected: float) -> None:
    assert providers.retry_delay(attempt, headers, MaxRandom(), now=NOW) == pytest.approx(expected)


@given(attempt=st.integers(min_value=1, max_value=50), seed=st.integers())
def test_backoff_is_full_jitter_under_the_cap(attempt: int, seed: int) -> None:
    delay = providers.retry_delay(attempt, {}, random.Random(seed), now=NOW)
    assert 0 <= delay <= min(providers.BACKOFF_CAP_S, providers.BACKOFF_BASE_S * 2 ** (attempt - 1))


@pytest.mark.parametrize(
    ("kind", "body", "reason"),
    [
        ("openai", [], "expected a JSON object"),
        ("openai", {"choices": []}, "no choices[0]"),
        ("openai", {"choices": [{"message": {"content": None, "refusal": "no"}}]}, "refused"),
        ("anthropic", {"content": [{"type": "tool_use"}]}, "no text block"),
        ("anthropic", {"usage": {}}, "no content list"),
    ],
)
def test_unusable_bodies_say_what_was_wrong(kind: str, body: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        wire.parse_reply(kind, body, "m")


def test_usage_that_is_not_a_count_is_unknown() -> None:
    body = {"content": [{"type": "text", "text": "a"}], "usage": {"input_tokens": True}}
    reply = wire.parse_reply("anthropic", body, "m")
    assert (reply.input_tokens, reply.output_tokens, reply.model) == (None, None, "m")


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ('{"error": {"message": "model  not\\nfound"}}', "model not found"),
        ('{"error": "ollama says no"}', "ollama says no"),
        ('{"object": "error", "message": "vllm says no"}', "vllm says no"),
        ("<html>bad gateway</html>", "<html>bad gateway</html>"),
        ("", "(empty body)"),
    ],
)
def test_error_detail_reads_each_servers_error_shape(text: str, detail: str) -> None:
    assert wire.error_detail(text) == detail


def test_an_error_body_json_cannot_read_is_summarized_as_text() -> None:
    """An error answer's body is evidence, whatever it holds: nested past the recursion
    limit or holding an integer past 4,300 digits, it is quoted as text, bounded."""
    for body in ("[" * 5000, '{"error": ' + "9" * 5000 + "}"):
        summary = wire.error_detail(body)
        assert summary == body[: wire.ERROR_DETAIL_CHARS]
