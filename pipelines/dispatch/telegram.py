"""Telegram channel dispatch: post the draft to a channel through the operator bot.

Called through `pipelines.dispatch.dispatch` with the application's
python-telegram-bot `Bot`. The text is HTML-escaped and split into messages
Telegram accepts (`pipelines.text.telegram.split`).

Telegram has no idempotency key: a retry after a crash between the send and
the outbox's record of it posts again, and a failure after the first of
several parts resends the earlier parts. Keep channel posts to one message
where duplicates matter.

A delivery with an image is one photo with the text as its caption when the text fits
Telegram's caption limit (1,024 characters once the HTML is parsed); a longer text is
sent as messages, the first showing the image as its preview above the text.
"""

from __future__ import annotations

import html
import warnings
from typing import Any

from telegram import LinkPreviewOptions
from telegram import error as tg_error
from telegram import warnings as tg_warnings

from pipelines.dispatch import base
from pipelines.ground import retry
from pipelines.text import redaction
from pipelines.text import telegram as telegram_text

#: Telegram's limit on a photo's caption, in UTF-16 code units after entity parsing.
MAX_CAPTION = 1024


def split_html(text: str, limit: int = telegram_text.MAX_MESSAGE) -> list[str]:
    """`text` HTML-escaped and cut into messages Telegram accepts; blank parts are dropped."""
    escaped = html.escape(text, quote=False)
    return [part for part in telegram_text.split(escaped, limit) if part.strip()]


async def send(
    target: base.TelegramChannelTarget, delivery: base.Delivery, *, bot: Any
) -> base.DispatchResult:
    """Post the photo or every part; the external id is the last message's id."""
    where = f"telegram chat {target.chat_id}"
    if bot is None:
        raise base.PermanentDispatchError(f"{where}: no bot was passed to dispatch()")
    parts = split_html(delivery.text)
    if not parts:
        raise base.PermanentDispatchError(f"{where}: item {delivery.item_id} has no text")
    try:
        message_ids, what = await _post(bot, target.chat_id, delivery, parts)
    except tg_error.TelegramError as error:
        raise _translate(error, where, getattr(bot, "token", "")) from None
    return base.DispatchResult(
        external_id=message_ids[-1],
        detail=f"posted {what} to {where}: {', '.join(message_ids)}",
    )


def _as_photo(delivery: base.Delivery) -> bool:
    # The text is escaped plain text: once Telegram parses the HTML it is the text again.
    text = delivery.text.strip()
    return bool(delivery.image_url) and telegram_text.utf16_len(text) <= MAX_CAPTION


async def _post(
    bot: Any, chat_id: int | str, delivery: base.Delivery, parts: list[str]
) -> tuple[list[str], str]:
    """The ids of the messages posted, and what they were ("a photo", "2 message(s)")."""
    if _as_photo(delivery):
        caption = html.escape(delivery.text.strip(), quote=False)
        try:
            message = await bot.send_photo(
                chat_id=chat_id, photo=delivery.image_url, caption=caption, parse_mode="HTML"
            )
            return [str(message.message_id)], "a photo"
        except tg_error.BadRequest as error:
            if not _picture_refused(error):
                raise
            # Telegram could not use the picture (unreachable, too large, not an image)
            # and posted nothing: the text goes as a message, its preview doing what it can.
    message_ids = []
    for index, part in enumerate(parts):
        preview = None
        if index == 0 and delivery.image_url:
            preview = LinkPreviewOptions(
                url=delivery.image_url, show_above_text=True, prefer_large_media=True
            )
        message = await bot.send_message(
            chat_id=chat_id, text=part, parse_mode="HTML", link_preview_options=preview
        )
        message_ids.append(str(message.message_id))
    return message_ids, f"{len(parts)} message(s)"


def _picture_refused(error: tg_error.BadRequest) -> bool:
    """Telegram's answers when it cannot fetch or read a photo given by URL."""
    words = error.message.lower()
    return any(sign in words for sign in ("url", "file identifier", "image", "photo", "webpage"))


def _translate(error: tg_error.TelegramError, where: str, token: str) -> base.DispatchError:
    """Flood control and network trouble are transient; refusals and bad requests are not."""
    text = redaction.redact(str(error.message), [token])
    problem = f"{where}: {type(error).__name__}: {text}"
    if isinstance(error, tg_error.RetryAfter):
        return base.TransientDispatchError(problem, retry_after=_seconds(error))
    # BadRequest is a NetworkError subclass in PTB, so it must be caught first.
    if isinstance(error, tg_error.BadRequest | tg_error.Forbidden | tg_error.InvalidToken):
        return base.PermanentDispatchError(problem)
    if isinstance(error, tg_error.ChatMigrated):
        return base.PermanentDispatchError(
            f"{problem} (set chat_id to {error.new_chat_id} in the pipeline's dispatch config)"
        )
    return base.TransientDispatchError(problem)


def _seconds(error: tg_error.RetryAfter) -> float:
    """RetryAfter.retry_after in seconds, whether PTB gives an int or a timedelta."""
    with warnings.catch_warnings():
        # Reading it as an int warns about the coming switch to timedelta.
        warnings.simplefilter("ignore", tg_warnings.PTBDeprecationWarning)
        value = error.retry_after
    return retry.seconds(value)
