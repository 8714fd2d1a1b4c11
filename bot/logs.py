"""Logging for the bot: a filter that redacts bot tokens, and quiet HTTP client loggers.

    logs.setup("INFO", secrets=[settings.telegram.token])   # once, at startup

The token sits inside every Bot API URL (`.../bot<token>/sendMessage`), so any library
that logs a URL or an exception about one would leak it. The filter runs on the root
handlers, so it sees every record that reaches a log line, from any logger.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

REDACTED = "<redacted>"
# Telegram bot tokens look like "<bot id>:<secret>"; inside URLs they follow "/bot".
_URL_TOKEN = re.compile(r"(/bot)\d+:[A-Za-z0-9_-]+")
_BARE_TOKEN = re.compile(r"\b\d{5,}:[A-Za-z0-9_-]{30,}\b")
#: Libraries whose INFO/DEBUG lines include request URLs.
NOISY_LOGGERS = ("httpx", "httpcore")


class RedactTokens(logging.Filter):
    """Replace bot tokens (the configured ones and anything shaped like one) in a record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        text = _URL_TOKEN.sub(r"\1" + REDACTED, text)
        return _BARE_TOKEN.sub(REDACTED, text)

    def filter(self, record: logging.LogRecord) -> bool:
        # Merge msg and args first: a token may sit in either, or be split across them.
        record.msg = self.redact(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


def install(secrets: Iterable[str] = ()) -> RedactTokens:
    """Put the filter on every root handler and keep HTTP client loggers at WARNING."""
    redactor = RedactTokens(secrets)
    for handler in logging.getLogger().handlers:
        handler.addFilter(redactor)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return redactor


def setup(level: str, secrets: Iterable[str] = ()) -> RedactTokens:
    """Configure root logging to stderr at `level`, with the redacting filter installed."""
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    return install(secrets)
