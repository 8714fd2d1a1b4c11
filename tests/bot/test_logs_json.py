"""JSON log lines: one object per record, the work's fields, redacted as text lines are."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bot.ground import logs
from pipelines.ground import logfields

TOKEN = "123456:AAHsecretsecretsecretsecretsecret_xyz"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonLines())
    root = logging.getLogger()
    root.addHandler(handler)
    redactor = logs.RedactTokens([TOKEN, "llm-key-1234567890"])
    handler.addFilter(logs.HideUpdates())
    handler.addFilter(redactor)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_line_is_json_with_the_bound_fields(captured: io.StringIO) -> None:
    log = logging.getLogger("gatehouse.test")
    with logfields.bound(pipeline="news", run=7):
        log.warning("run %d of %s", 7, "news")
        with logfields.bound(item=12, attempt=2):
            log.warning("drafting")
    log.warning("outside", extra={"fields": {"outbox": 3}})
    first, second, third = lines(captured)
    assert first["message"] == "run 7 of news" and first["level"] == "WARNING"
    assert (first["pipeline"], first["run"], "item" in first) == ("news", 7, False)
    assert (second["item"], second["attempt"], second["run"]) == (12, 2, 7)
    assert third["outbox"] == 3 and "pipeline" not in third
    assert first["logger"] == "gatehouse.test" and str(first["ts"]).endswith("+00:00")


def test_secrets_are_redacted_in_messages_and_tracebacks(captured: io.StringIO) -> None:
    log = logging.getLogger("gatehouse.test")
    log.warning("calling https://api.telegram.org/bot%s/getMe with %s", TOKEN, "llm-key-1234567890")
    try:
        raise RuntimeError(f"bad answer from /bot{TOKEN}/sendMessage")
    except RuntimeError:
        log.exception("send failed")
    text = captured.getvalue()
    assert TOKEN not in text and "llm-key-1234567890" not in text
    message, failure = lines(captured)
    assert message["message"] == (
        "calling https://api.telegram.org/bot<redacted>/getMe with <redacted>"
    )
    assert "RuntimeError: bad answer from /bot<redacted>/sendMessage" in str(failure["exc"])


def test_an_unknown_field_is_refused() -> None:
    unknown = logfields.bound(token="x")
    with pytest.raises(ValueError, match="valid: pipeline, run, item, attempt, outbox"):
        unknown.__enter__()


def test_installed_cleaning_reaches_a_handler_added_later_on_any_logger() -> None:
    """The cleaning happens as a record is made: a library's own handler, added after
    setup, gets the record redacted and an update reduced to its id."""
    before = logging.getLogRecordFactory()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    library = logging.getLogger("telegram.ext.Updater")
    try:
        logs.install(["configured-secret-e5f1a2"])
        library.addHandler(handler)
        library.warning("token %s in %s", "ghtk_abcdefghijklmnop", "configured-secret-e5f1a2")
        library.warning("Processing update %s", {"update_id": 5, "message": {"text": "hi"}})
    finally:
        library.removeHandler(handler)
        logging.setLogRecordFactory(before)
    assert stream.getvalue().splitlines() == [
        "token ghtk_<redacted> in <redacted>",
        "Processing update update 5 (message from None)",
    ]
