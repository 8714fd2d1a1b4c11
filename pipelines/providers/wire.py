"""The two wire shapes a provider speaks: building the request and reading the reply.

`providers.ProviderClient` owns the HTTP call, the retries and the errors; this
module only knows JSON. OpenAI-compatible chat completions (OpenAI, OpenRouter,
vLLM, Ollama) and Anthropic messages. Parsing raises `ValueError` with a reason
that the client turns into `providers.ProviderBadOutput`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pipelines.providers.settings import ProviderSettings

#: Anthropic has no JSON mode; this instruction is the documented substitute.
ANTHROPIC_JSON_INSTRUCTION = "Reply with one JSON object and nothing else: no prose, no code fence."
#: Enough of a provider's error text to see what was wrong, short enough for a log line.
ERROR_DETAIL_CHARS = 300


@dataclass(frozen=True)
class WireRequest:
    """One HTTP POST, ready to send."""

    url: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """What a 2xx body said, before the client adds attempt bookkeeping."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    model: str
    body_id: str | None


def build_request(
    settings: ProviderSettings,
    system: str,
    prompt: str,
    *,
    max_tokens: int,
    json_output: bool,
) -> WireRequest:
    """The request for `settings.kind`, with the key in a header and never in the URL."""
    if settings.kind == "anthropic":
        return _anthropic_request(settings, system, prompt, max_tokens, json_output)
    return _openai_request(settings, system, prompt, max_tokens, json_output)


def _openai_request(
    settings: ProviderSettings,
    system: str,
    prompt: str,
    max_tokens: int,
    json_output: bool,
) -> WireRequest:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    # max_tokens rather than max_completion_tokens: every OpenAI-compatible server accepts it.
    body: dict[str, Any] = {"model": settings.model, "messages": messages, "max_tokens": max_tokens}
    if json_output:
        body["response_format"] = {"type": "json_object"}
    key = settings.api_key.get_secret_value()
    # Local servers (Ollama, vLLM) often run without a key; an empty Bearer is malformed.
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return WireRequest(f"{settings.base_url}/chat/completions", headers, body)


def _anthropic_request(
    settings: ProviderSettings,
    system: str,
    prompt: str,
    max_tokens: int,
    json_output: bool,
) -> WireRequest:
    if json_output:
        system = (
            f"{system}\n\n{ANTHROPIC_JSON_INSTRUCTION}" if system else ANTHROPIC_JSON_INSTRUCTION
        )
    body: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
    }
    if system:
        body["system"] = system
    key = settings.api_key.get_secret_value()
    headers = {"x-api-key": key, "anthropic-version": settings.anthropic_version}
    return WireRequest(f"{settings.base_url}/v1/messages", headers, body)


def parse_reply(kind: str, body: Any, default_model: str) -> Reply:
    """Read a 2xx body; raises ValueError saying which field was missing or wrong."""
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")
    text = _anthropic_text(body) if kind == "anthropic" else _openai_text(body)
    usage = body.get("usage")
    if kind == "anthropic":
        input_tokens, output_tokens = _count(usage, "input_tokens"), _count(usage, "output_tokens")
    else:
        input_tokens, output_tokens = (
            _count(usage, "prompt_tokens"),
            _count(usage, "completion_tokens"),
        )
    model = body.get("model")
    body_id = body.get("id")
    return Reply(
        text=text,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        model=model if isinstance(model, str) and model else default_model,
        body_id=body_id if isinstance(body_id, str) and body_id else None,
    )


def _openai_text(body: dict[str, Any]) -> str:
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError("no choices[0] in the reply")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ValueError("no choices[0].message in the reply")
    content = message.get("content")
    if isinstance(content, str):
        return content
    refusal = message.get("refusal")
    if isinstance(refusal, str):
        raise ValueError(f"the model refused: {refusal[:ERROR_DETAIL_CHARS]}")
    raise ValueError("choices[0].message.content is not a string")


def _anthropic_text(body: dict[str, Any]) -> str:
    content = body.get("content")
    if not isinstance(content, list):
        raise ValueError("no content list in the reply")
    texts = [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    if not texts:
        raise ValueError("no text block in content")
    return "".join(texts)


def _count(usage: Any, field: str) -> int | None:
    """A token count, or None when the provider did not report a usable one."""
    if not isinstance(usage, dict):
        return None
    value = usage.get(field)
    # bool is an int subclass; `true` is not a token count.
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def error_detail(text: str) -> str:
    """The provider's own error message from a non-2xx body, shortened for a log line."""
    message: Any = None
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, a huge integer, nested too deeply
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        # OpenAI and Anthropic: {"error": {"message"}}; Ollama: {"error": "..."}; vLLM: {"message"}.
        message = error.get("message") if isinstance(error, dict) else error
        if not isinstance(message, str):
            message = body.get("message")
    if not isinstance(message, str):
        message = text
    flat = " ".join(message.split())
    return flat[:ERROR_DETAIL_CHARS] or "(empty body)"
