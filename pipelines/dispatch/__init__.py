"""Dispatch: carry an operator-approved draft out to its destination.

One module per kind (`webhook`, `file`, `smtp`, `telegram`), each with `send`; `base`
holds the contract they share (deliveries, results, errors, target models), re-exported
here, and `dispatcher` is the loop that claims approved items and calls `dispatch`.
A new kind is a module here, a target model in `base` and a case below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pipelines.dispatch.base import (
    MAX_ATTEMPTS,
    RETRY_BASE_SECONDS,
    RETRY_CAP_SECONDS,
    Delivery,
    DispatchError,
    DispatchResult,
    DispatchTarget,
    FileTarget,
    NoneTarget,
    PermanentDispatchError,
    SmtpTarget,
    TelegramChannelTarget,
    TransientDispatchError,
    WebhookTarget,
    check_pipeline_name,
    idempotency_key,
    read_env,
    retry_delay,
)

if TYPE_CHECKING:
    import httpx

__all__ = [
    "MAX_ATTEMPTS",
    "RETRY_BASE_SECONDS",
    "RETRY_CAP_SECONDS",
    "Delivery",
    "DispatchError",
    "DispatchResult",
    "DispatchTarget",
    "FileTarget",
    "NoneTarget",
    "PermanentDispatchError",
    "SmtpTarget",
    "TelegramChannelTarget",
    "TransientDispatchError",
    "WebhookTarget",
    "check_pipeline_name",
    "dispatch",
    "idempotency_key",
    "read_env",
    "retry_delay",
]


async def dispatch(
    target: DispatchTarget,
    delivery: Delivery,
    *,
    client: httpx.AsyncClient,
    bot: Any = None,
    env: Mapping[str, str] | None = None,
) -> DispatchResult:
    """Make one attempt to deliver; raise Transient or PermanentDispatchError on failure.

    `bot` is a python-telegram-bot `Bot` (needed only by telegram_channel);
    `env` replaces os.environ for "env:" lookups (tests).
    """
    # The kinds load their clients (httpx, aiosmtplib, telegram); reading pipeline
    # files needs only the target models, and the CLI must start quickly.
    from pipelines.dispatch import file as dispatch_file
    from pipelines.dispatch import smtp as dispatch_smtp
    from pipelines.dispatch import telegram as dispatch_telegram
    from pipelines.dispatch import webhook as dispatch_webhook

    match target:
        case WebhookTarget():
            return await dispatch_webhook.send(target, delivery, client=client, env=env)
        case FileTarget():
            return await dispatch_file.send(target, delivery)
        case SmtpTarget():
            return await dispatch_smtp.send(target, delivery, env=env)
        case TelegramChannelTarget():
            return await dispatch_telegram.send(target, delivery, bot=bot)
        case NoneTarget():
            return DispatchResult(external_id=None, detail="no dispatch target")
    raise PermanentDispatchError(f"unknown dispatch target {type(target).__name__}")
