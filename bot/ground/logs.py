"""Logging for the bot: every record is redacted and stripped of what users wrote, and
HTTP client loggers are quiet.

    logs.setup("INFO", secrets=[settings.telegram.token])   # once, at startup

The token sits inside every Bot API URL (`.../bot<token>/sendMessage`), so any library
that logs a URL or an exception about one would leak it; tornado logs the whole value of
a header it refuses (a trigger token followed by a control character). Redaction
(pipelines.text.redaction) covers every kind of token and secret gatehouse issues or
holds. At DEBUG, python-telegram-bot logs every incoming update whole, a stranger's text
included; those lines keep the update's id, kind and sender id only. Both are done when
a record is made (the logging module's record factory), so no handler, whoever added it
and whenever, and no logger, gatehouse's or a library's, ever sees the raw text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from pipelines.ground import logfields
from pipelines.text import redaction

#: Libraries whose INFO/DEBUG lines include request URLs.
NOISY_LOGGERS = ("httpx", "httpcore")


class RedactTokens(logging.Filter):
    """Replace tokens and secrets (the given ones, the remembered ones and anything shaped
    like one) in a record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def redact(self, text: str) -> str:
        return redaction.redact(text, self.secrets)

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


class HideUpdates(logging.Filter):
    """Replace python-telegram-bot's dumps of incoming updates by their ids, kinds and
    senders: an update carries whatever a stranger typed, which no log line may keep."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, dict) and "update_id" in record.args:
            record.args = (record.args,)  # logging unwraps a lone dict argument
        if not record.name.startswith("telegram") or not isinstance(record.args, tuple):
            return True
        message = str(record.msg)
        args = record.args
        if message.startswith("Call to Bot API endpoint") and args[:1] == ("getUpdates",):
            record.args = (args[0], describe_updates(args[1]), *args[2:])
        elif "update" in message.lower() or "received data" in message.lower():
            record.args = tuple(describe_updates(arg) for arg in args)
        return True


def describe_updates(value: Any) -> Any:
    """An update (object, dict or JSON text) or a list of them, as ids, kinds and senders;
    anything else unchanged."""
    if isinstance(value, (list, tuple)):
        return [describe_updates(part) for part in value]
    if isinstance(value, (str, bytes)):
        return f"<{len(value)} characters hidden>" if value[:1] in ("{", b"{") else value
    data = value.to_dict() if hasattr(value, "to_dict") and hasattr(value, "update_id") else value
    if not isinstance(data, dict) or "update_id" not in data:
        return value
    kinds = [key for key in data if key != "update_id"]
    kind = kinds[0] if kinds else "empty"
    body = data.get(kind)
    sender = body.get("from", {}).get("id") if isinstance(body, dict) else None
    return f"update {data['update_id']} ({kind} from {sender})"


_make_record = logging.getLogRecordFactory()
_HIDER = HideUpdates()
_REDACTOR = RedactTokens()


def _clean_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _make_record(*args, **kwargs)
    # Updates first: the redactor merges a record's arguments into its message.
    _HIDER.filter(record)
    _REDACTOR.filter(record)
    return record


def install(secrets: Iterable[str] = ()) -> RedactTokens:
    """Remember `secrets`, clean every record from now on as it is made, and keep HTTP
    client loggers at WARNING."""
    redaction.remember(*secrets)
    logging.setLogRecordFactory(_clean_record)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    return _REDACTOR


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the work's fields
    (pipeline, run, item, attempt, outbox; see pipelines.ground.logfields) and any traceback.

    It formats what the filters left, so the redaction is that of text lines."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = {**logfields.current(), **getattr(record, "fields", {})}
        line.update((name, fields[name]) for name in logfields.FIELDS if name in fields)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, default=str)


def setup(level: str, secrets: Iterable[str] = (), *, json_lines: bool = False) -> RedactTokens:
    """Configure root logging to stderr at `level`, with every record redacted;
    `json_lines`: one JSON object per line instead of text."""
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    if json_lines:
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonLines())
    # A library's warning is a log line too (redacted, and JSON in JSON mode), not raw text.
    logging.captureWarnings(True)
    return install(secrets)
