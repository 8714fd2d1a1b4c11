"""Telegram channel dispatch: post the draft to a channel through the operator bot.

Called through `pipelines.dispatch.dispatch` with the application's
python-telegram-bot `Bot`. The text is HTML-escaped and split into messages
of at most 4096 characters, at line breaks where possible.

Telegram has no idempotency key: a retry after a crash between the send and
the outbox's record of it posts again, and a failure after the first of
several parts resends the earlier parts. Keep channel posts to one message
where duplicates matter.
"""

from __future__ import annotations

import html
import re
import warnings
from collections.abc import Iterator
from typing import Any

from telegram import error as tg_error
from telegram import warnings as tg_warnings

from pipelines import retry
from pipelines.dispatch import base as dispatch

#: Telegram's limit for one message's text, counted after entity parsing; we
#: count the escaped HTML, which is never shorter, so we stay under it.
MESSAGE_LIMIT = 4096
# A Bot API URL carries the token as /bot<id>:<secret>/: never let it into a message.
_TOKEN = re.compile(r"\d{3,}:[A-Za-z0-9_-]{20,}")


def split_html(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """`text` HTML-escaped and cut into messages of at most `limit` characters.

    Cuts fall between lines, or inside an overlong line at a space where one
    is near, and never inside an escape such as `&amp;`. Blank parts are dropped.
    """
    if limit < 8:
        raise ValueError(f"limit must leave room for an escape such as '&amp;', got {limit}")
    chunks: list[str] = []
    current = ""
    for piece in _pieces(text, limit):
        escaped = html.escape(piece, quote=False)
        if len(current) + len(escaped) > limit:
            chunks.append(current)
            current = ""
        current += escaped
    chunks.append(current)
    return [chunk for chunk in chunks if chunk.strip()]


def _pieces(text: str, limit: int) -> Iterator[str]:
    """Lines of `text`, with any line too long to fit one message broken up."""
    for line in text.splitlines(keepends=True):
        while _escaped_len(line) > limit:
            cut = _fit(line, limit)
            space = line.rfind(" ", 0, cut)
            if space > cut // 2:
                cut = space + 1
            yield line[:cut]
            line = line[cut:]
        yield line


def _escaped_len(text: str) -> int:
    return len(html.escape(text, quote=False))


def _fit(line: str, limit: int) -> int:
    """The longest prefix of `line` whose escaped form fits in `limit`."""
    used = 0
    for index, char in enumerate(line):
        used += _escaped_len(char)
        if used > limit:
            return index
    return len(line)


async def send(
    target: dispatch.TelegramChannelTarget, delivery: dispatch.Delivery, *, bot: Any
) -> dispatch.DispatchResult:
    """Post every part; the external id is the last message's id."""
    where = f"telegram chat {target.chat_id}"
    if bot is None:
        raise dispatch.PermanentDispatchError(f"{where}: no bot was passed to dispatch()")
    parts = split_html(delivery.text)
    if not parts:
        raise dispatch.PermanentDispatchError(f"{where}: item {delivery.item_id} has no text")
    message_ids = []
    for part in parts:
        try:
            message = await bot.send_message(chat_id=target.chat_id, text=part, parse_mode="HTML")
        except tg_error.TelegramError as error:
            raise _translate(error, where, getattr(bot, "token", "")) from None
        message_ids.append(str(message.message_id))
    return dispatch.DispatchResult(
        external_id=message_ids[-1],
        detail=f"posted {len(parts)} message(s) to {where}: {', '.join(message_ids)}",
    )


def _translate(error: tg_error.TelegramError, where: str, token: str) -> dispatch.DispatchError:
    """Flood control and network trouble are transient; refusals and bad requests are not."""
    text = str(error.message)
    if token:
        text = text.replace(token, "<token>")
    problem = f"{where}: {type(error).__name__}: {_TOKEN.sub('<token>', text)}"
    if isinstance(error, tg_error.RetryAfter):
        return dispatch.TransientDispatchError(problem, retry_after=_seconds(error))
    # BadRequest is a NetworkError subclass in PTB, so it must be caught first.
    if isinstance(error, tg_error.BadRequest | tg_error.Forbidden | tg_error.InvalidToken):
        return dispatch.PermanentDispatchError(problem)
    if isinstance(error, tg_error.ChatMigrated):
        return dispatch.PermanentDispatchError(
            f"{problem} (set chat_id to {error.new_chat_id} in the pipeline's dispatch config)"
        )
    return dispatch.TransientDispatchError(problem)


def _seconds(error: tg_error.RetryAfter) -> float:
    """RetryAfter.retry_after in seconds, whether PTB gives an int or a timedelta."""
    with warnings.catch_warnings():
        # Reading it as an int warns about the coming switch to timedelta.
        warnings.simplefilter("ignore", tg_warnings.PTBDeprecationWarning)
        value = error.retry_after
    return retry.seconds(value)
