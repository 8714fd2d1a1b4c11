"""Webhook dispatch: POST the draft as JSON with an `Idempotency-Key` header.

Called through `pipelines.dispatch.dispatch`. Errors name the endpoint by
scheme, host and port only: webhook paths and queries often hold tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

from pipelines.dispatch import base
from pipelines.ground import retry

# Statuses that mean "not now" rather than "never": timeout, a concurrent
# request with the same key still running, and rate limiting.
_TRANSIENT_4XX = frozenset({408, 409, 429})
#: How much of an error response body goes into the error message.
_BODY_SNIPPET = 200


def payload(delivery: base.Delivery) -> dict[str, Any]:
    """The JSON body the webhook receives."""
    return {
        "item_id": delivery.item_id,
        "pipeline": delivery.pipeline,
        "version": delivery.version,
        "attempt": delivery.attempt,
        "title": delivery.title,
        "link": delivery.link,
        "image_url": delivery.image_url,
        "text": delivery.text,
    }


def endpoint(url: str) -> str:
    """The part of a URL safe to show: scheme, host and port."""
    parsed = httpx.URL(url)
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.host}{port}"


def resolve_headers(target: base.WebhookTarget, env: Mapping[str, str] | None) -> dict[str, str]:
    """Config headers with "env:NAME" values replaced by the variable's value."""
    resolved = {}
    for name, value in target.headers.items():
        if value.startswith("env:"):
            value = base.read_env(
                value.removeprefix("env:"), env, needed_for=f"webhook header {name}"
            )
        resolved[name] = value
    return resolved


async def send(
    target: base.WebhookTarget,
    delivery: base.Delivery,
    *,
    client: httpx.AsyncClient,
    env: Mapping[str, str] | None = None,
) -> base.DispatchResult:
    """POST one delivery; 2xx is success, the rest maps to Transient or Permanent."""
    where = endpoint(target.url)
    headers = resolve_headers(target, env)
    headers["Idempotency-Key"] = delivery.idempotency_key
    try:
        response = await client.post(
            target.url, json=payload(delivery), headers=headers, timeout=target.timeout
        )
    except httpx.TimeoutException as error:
        raise base.TransientDispatchError(
            f"webhook {where}: no answer within {target.timeout:g} s ({type(error).__name__})"
        ) from None
    except httpx.UnsupportedProtocol:
        raise base.PermanentDispatchError(f"webhook {where}: unsupported URL") from None
    except httpx.TransportError as error:
        raise base.TransientDispatchError(
            f"webhook {where}: {type(error).__name__}: {_scrub(str(error), headers)}"
        ) from None
    return _result(response, where, headers)


def _result(
    response: httpx.Response, where: str, headers: Mapping[str, str]
) -> base.DispatchResult:
    status = response.status_code
    if response.is_success:
        return base.DispatchResult(
            external_id=_response_id(response), detail=f"webhook {where} answered {status}"
        )
    problem = f"webhook {where} answered {status} {response.reason_phrase}"
    snippet = _scrub(response.text[:_BODY_SNIPPET].strip(), headers)
    if snippet:
        problem += f": {snippet}"
    if status >= 500 or status in _TRANSIENT_4XX:
        # An HTTP-date Retry-After is ignored (no clock here): the row's backoff covers it.
        wait = retry.retry_after_s(response.headers, None)
        raise base.TransientDispatchError(problem, retry_after=wait)
    if 300 <= status < 400:
        problem += " (redirects are not followed: configure the final URL)"
    raise base.PermanentDispatchError(problem)


def _response_id(response: httpx.Response) -> str | None:
    """The `id` of a JSON object response, if the webhook returns one."""
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(body, dict) and body.get("id") is not None:
        return str(body["id"])
    return None


def _scrub(text: str, headers: Mapping[str, str]) -> str:
    """Remove header values (which may be secrets) that a server echoed back."""
    for name, value in headers.items():
        if name != "Idempotency-Key" and len(value) >= 4:
            text = text.replace(value, "<redacted>")
    return text
