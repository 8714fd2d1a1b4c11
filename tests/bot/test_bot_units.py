"""Pure parts of the bot: button data, rendering, the operator gate, redaction, startup checks."""

from __future__ import annotations

import json
import logging
import re
import types
from datetime import datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from telegram import Update

from bot import app
from bot import settings as settings_mod
from bot.chat import auth, card_text, kit, render
from bot.commands import handlers
from bot.ground import callbacks, logs
from pipelines import operations
from pipelines.text import redaction

KEY = callbacks.derive_key("123:abc")
TOKEN = "8123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw_x"


def test_buttons_round_trip_within_64_bytes() -> None:
    biggest = callbacks.Button("approve", 2**63 - 1, 10**6, 10**6)
    data = callbacks.encode(KEY, biggest)
    assert len(data.encode()) <= 64
    assert callbacks.decode(KEY, data) == biggest


@pytest.mark.parametrize(
    "tamper",
    [
        lambda d: d.replace(":a:", ":r:"),  # another action under the same tag
        lambda d: d[:-1] + ("A" if d[-1] != "A" else "B"),  # a forged tag
        lambda d: d.rpartition(":")[0],  # no tag
        lambda d: "",
    ],
)
def test_a_changed_button_is_refused(tamper: object) -> None:
    data = callbacks.encode(KEY, callbacks.Button("approve", 12, 1, 3))
    with pytest.raises(callbacks.InvalidButton):
        callbacks.decode(KEY, tamper(data))  # type: ignore[operator]


FORGED = "this button was not made by this bot (bad or missing tag)"
FIELDS = st.sampled_from(["format", "action", "item_id", "attempt", "version"])
#: Each action's code on the wire. Buttons already sitting in chats carry these: a code
#: that changed would turn every one of them into another action, or into garbage.
WIRE_CODES = {
    "approve": "a", "reject": "r", "edit": "e", "replay": "p", "fresh": "f", "retry": "t",
    "show": "s", "why": "w", "other": "o", "back": "b", "undo": "u", "redraft": "d",
    "all_approve": "A", "all_reject": "R", "yes_approve": "Y", "yes_reject": "N",
    "cancel": "c", "approve_anyway": "k",
}  # fmt: skip
#: Buttons as this bot makes them: every action, ids, attempts and versions from 1 (a
#: replay offer's version 0 is pinned separately), and an arg (a preset reason's number).
BUTTONS = st.builds(
    callbacks.Button,
    st.sampled_from(sorted(WIRE_CODES)),
    st.integers(1, 2**40),
    st.integers(1, 10**6),
    st.integers(1, 10**6),
    st.integers(0, callbacks.MAX_ARG),
)


@given(button=BUTTONS, field=FIELDS, other=st.integers(0, 2**40))
def test_every_field_is_covered_by_the_tag(
    button: callbacks.Button, field: str, other: int
) -> None:
    """Change any one field and keep the tag: the button must be refused as forged."""
    data = callbacks.encode(KEY, button)
    parts = data.split(":")
    index = ["format", "action", "item_id", "attempt", "version"].index(field)
    if field == "action":
        codes = [c for c in "arepf" if c != parts[1]]
        parts[1] = codes[other % len(codes)]
    else:
        parts[index] = str(other + 1 if str(other) == parts[index] else other)
    with pytest.raises(callbacks.InvalidButton, match=f"^{re.escape(FORGED)}$"):
        callbacks.decode(KEY, ":".join(parts))


@given(button=BUTTONS)
def test_every_button_round_trips_exactly(button: callbacks.Button) -> None:
    data = callbacks.encode(KEY, button)
    code = WIRE_CODES[button.action] + (str(button.arg) if button.arg else "")
    body = f"1:{code}:{button.item_id}:{button.attempt}:{button.version}"
    assert data == f"{body}:{callbacks._tag(KEY, body)}"
    assert callbacks.decode(KEY, data) == button


def test_the_tag_is_a_known_answer() -> None:
    # HMAC-SHA256 under the derived key, first 12 bytes, base64url: 16 characters, no padding.
    assert callbacks.encode(KEY, callbacks.Button("approve", 44, 1, 1)) == (
        "1:a:44:1:1:le5mSv0JT4YZrIUX"
    )
    data = callbacks.encode(KEY, callbacks.Button("replay", 12, 1, 3))
    assert data == "1:p:12:1:3:" + callbacks._tag(KEY, "1:p:12:1:3")


def test_the_key_derived_from_a_token_is_stable() -> None:
    """Buttons must keep verifying after an upgrade: the derivation is a known answer."""
    assert callbacks.derive_key("123:abc").hex() == (
        "63ff3a8c7e7dc7fa65dc82c85219caf9768d652fcb91b5aba97658b3c1a76a00"
    )


def test_a_button_of_exactly_64_bytes_is_made() -> None:
    button = callbacks.Button("approve", 10**18 + 1, 10**10, 10**10)
    assert len(callbacks.encode(KEY, button).encode()) == 64
    assert callbacks.decode(KEY, callbacks.encode(KEY, button)) == button


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("2:a:12:1:3", "older version of the bot"),
        ("1:a:12:1", "older version of the bot"),
        ("1:a:12:1:3:4", "older version of the bot"),
        ("1:q:12:1:3", "malformed"),  # no action has the code q
        ("1:w0:12:1:3", "malformed"),  # an arg is 1 to 9, and absent for none
        ("1:w10:12:1:3", "malformed"),
        ("1:wx:12:1:3", "malformed"),
        ("1:a:-1:1:3", "malformed"),
        ("1:a:12:1:v3", "malformed"),
    ],
)
def test_well_tagged_but_unknown_layouts_are_refused(body: str, message: str) -> None:
    full = {
        "older version of the bot": "this button comes from an older version of the bot",
        "malformed": "this button's data is malformed",
    }[message]
    with pytest.raises(callbacks.InvalidButton, match=f"^{re.escape(full)}$"):
        callbacks.decode(KEY, f"{body}:{callbacks._tag(KEY, body)}")


def test_a_button_arg_past_nine_is_refused_when_made() -> None:
    with pytest.raises(ValueError) as refused:
        callbacks.encode(KEY, callbacks.Button("why", 1, 1, 1, 10))
    assert str(refused.value) == "a button's arg is 0 to 9, not 10"


def test_the_last_and_the_first_arg_are_made_and_read_back() -> None:
    for arg in (0, callbacks.MAX_ARG):
        button = callbacks.Button("why", 1, 1, 1, arg)
        assert callbacks.decode(KEY, callbacks.encode(KEY, button)) == button


def test_a_button_past_64_bytes_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="Telegram allows 64"):
        callbacks.encode(KEY, callbacks.Button("approve", 10**20, 10**10, 10**10))


def test_a_button_made_with_another_key_is_refused() -> None:
    data = callbacks.encode(callbacks.derive_key("999:other"), callbacks.Button("reject", 1, 1, 1))
    with pytest.raises(callbacks.InvalidButton, match="not made by this bot"):
        callbacks.decode(KEY, data)


def test_a_card_escapes_what_it_fetched() -> None:
    payload = {
        "pipeline": "news",
        "title": "<script>",
        "link": 'https://x.example/?a=1&b="2"',
        "text": "a < b & c",
        "version": 2,
        "attempt": 1,
        "drafter": "template",
        "cost_micros": 1_500_000,
        "duplicate_of": 7,
        "duplicate_reason": "same <title>",
    }
    text = card_text.card(3, payload)
    assert "&lt;script&gt;" in text and "a &lt; b &amp; c" in text
    assert 'href="https://x.example/?a=1&amp;b=&quot;2&quot;"' in text
    assert "possible duplicate of item 7: same &lt;title&gt;" in text
    assert "cost $1.50" in text


def test_a_card_says_a_title_once_and_as_the_feed_meant_it() -> None:
    base = {"pipeline": "news", "version": 1, "attempt": 1, "drafter": "template"}
    # A title stored before titles were cleaned at load, and its cleaned draft.
    old = card_text.card(1, base | {"title": "Zero\u200bwidth", "text": "Zerowidth\n\nbody"})
    assert old.count("Zerowidth") == 1 and "\u200b" not in old
    at_t = card_text.card(2, base | {"title": "AT&T cuts prices <again>", "text": "Prices fall"})
    assert at_t.split("\n")[1] == "AT&amp;T cuts prices &lt;again&gt;"  # escaped once, for HTML


def test_whole_numbers_from_text_are_ascii_digits_in_range() -> None:
    assert operations.whole_number("12", "n") == 12
    assert operations.whole_number(" #12 ", "n") == 12
    assert operations.whole_number(operations.MAX_ID, "n") == operations.MAX_ID
    assert operations.whole_number("7", "days", high=9) == 7
    for bad in ("²", "١٢", "1e3", "-1", "0", "", "12a", str(10**30), 10**30, True, 1.5, None):
        with pytest.raises(
            operations.Invalid,
            match=f"^n must be a whole number from 1 to {operations.MAX_ID}, not ",
        ):
            operations.whole_number(bad, "n")
    with pytest.raises(
        operations.Invalid, match=r"^days must be a whole number from 1 to 9, not '10'$"
    ):
        operations.whole_number("10", "days", high=9)


def test_button_numbers_are_checked_after_the_tag() -> None:
    key = b"k" * 32
    good = callbacks.Button("approve", 12, 1, 3)
    assert callbacks.decode(key, callbacks.encode(key, good)) == good
    for bad in (
        callbacks.Button("approve", 10**19, 1, 3),
        callbacks.Button("approve", 2**63, 1, 3),  # 19 digits, one past SQLite's largest
        callbacks.Button("approve", 12, 0, 3),
        callbacks.Button("reject", 12, 1, 0),
        callbacks.Button("replay", 0, 1, 0),
    ):
        with pytest.raises(callbacks.InvalidButton, match=r"^this button's data is malformed$"):
            callbacks.decode(key, callbacks.encode(key, bad))
    offer = callbacks.Button("replay", 12, 2, 0)  # an item no card has shown a draft of
    assert callbacks.decode(key, callbacks.encode(key, offer)) == offer
    body = "1:a:\u00b2:1:1"  # str.isdigit() says yes to "²"; int() does not
    with pytest.raises(callbacks.InvalidButton, match="malformed"):
        callbacks.decode(key, f"{body}:{callbacks._tag(key, body)}")


def test_python_telegram_bots_update_dumps_keep_ids_only() -> None:
    update = Update.de_json(
        {
            "update_id": 77,
            "message": {
                "message_id": 5, "date": 0, "text": "stranger secret",
                "chat": {"id": 666, "type": "private"},
                "from": {"id": 666, "is_bot": False, "first_name": "S"},
            },
        },
        None,
    )  # fmt: skip
    assert update is not None
    raw = [update.to_dict()]
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(self.format(record))

    handler = Keep()
    handler.addFilter(logs.HideUpdates())
    logger = logging.getLogger("telegram.ext.Application")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        logger.debug("Processing update %s", update)
        logger.debug("Dropping pending update: %s", update)
        logging.getLogger("telegram.Bot").addHandler(handler)
        logging.getLogger("telegram.Bot").warning(
            "Call to Bot API endpoint `%s` finished with return value `%s`", "getUpdates", raw
        )
        logger.debug("Webhook received data: %s", json.dumps(raw[0]))
    finally:
        logger.removeHandler(handler)
        logging.getLogger("telegram.Bot").removeHandler(handler)
        logger.setLevel(old_level)
    assert lines == [
        "Processing update update 77 (message from 666)",
        "Dropping pending update: update 77 (message from 666)",
        "Call to Bot API endpoint `getUpdates` finished with return value"
        " `['update 77 (message from 666)']`",
        f"Webhook received data: <{len(json.dumps(raw[0]))} characters hidden>",
    ]


def test_decision_lines() -> None:
    at = datetime(2026, 1, 2, 3, 4, tzinfo=None).astimezone()
    assert (
        card_text.decision_line({"status": "✅ approved by 5 at x"}, at) == "✅ approved by 5 at x"
    )
    rejected = card_text.decision_line({"state": "rejected", "decided_by": [5]}, at)
    assert rejected.startswith("❌ rejected by 5")


def test_the_gate_ignores_strangers_and_limits_each_operator(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = datetime(2026, 1, 1).astimezone()
    gate = auth.Gate([1, 2], per_minute=2)
    assert (gate.strangers, gate.limited) == (0, 0)
    with caplog.at_level(logging.INFO, logger="bot.chat.auth"):
        assert gate.check(3, now) == "stranger" and gate.check(None, now) == "stranger"
        assert [gate.check(1, now) for _ in range(4)] == [
            "operator",
            "operator",
            "limited",
            "limited",
        ]
    assert (gate.strangers, gate.limited) == (2, 2)
    # The stranger's id is what an operator looks for in the log to add someone.
    assert caplog.messages == [
        "ignored an update from non-operator 3 (1 so far)",
        "ignored an update from non-operator None (2 so far)",
        "operator 1 is over 2 actions per minute",
        "operator 1 is over 2 actions per minute",
    ]
    assert gate.check(2, now) == "operator"  # limits are per operator
    assert gate.check(1, now + timedelta(minutes=1)) == "operator"
    with pytest.raises(
        ValueError, match=r"^no operators configured: set GATEHOUSE_TELEGRAM__OPERATORS$"
    ):
        auth.Gate([], per_minute=1)


@pytest.mark.parametrize(("per_minute", "allowed"), [(0, 5), (-1, 5), (1, 1), (3, 3)])
def test_the_rate_limit_allows_exactly_per_minute_and_zero_means_no_limit(
    per_minute: int, allowed: int
) -> None:
    now = datetime(2026, 1, 1).astimezone()
    gate = auth.Gate([1], per_minute=per_minute)
    verdicts = [gate.check(1, now + timedelta(seconds=n)) for n in range(5)]
    assert verdicts == ["operator"] * allowed + ["limited"] * (5 - allowed)
    # The window slides: a minute after the first action, one more is allowed.
    later = gate.check(1, now + timedelta(minutes=1))
    assert later == "operator"


def test_the_filter_redacts_tokens_in_messages_args_and_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    redactor = logs.RedactTokens([TOKEN])
    caplog.handler.addFilter(redactor)
    log = logging.getLogger("test.redact")
    try:
        log.warning("GET https://api.example/bot%s/getMe", TOKEN)
        log.warning("url %s", "http://127.0.0.1:1/bot42:short-local-token/sendMessage")
        try:
            raise RuntimeError(f"failed: {TOKEN}")
        except RuntimeError:
            log.exception("boom")
    finally:
        caplog.handler.removeFilter(redactor)
    assert TOKEN not in caplog.text and "short-local-token" not in caplog.text
    assert caplog.text.count(redaction.REDACTED) >= 3


@pytest.mark.parametrize(
    ("telegram", "reason"),
    [
        ({"token": TOKEN}, "OPERATORS is empty"),
        ({"operators": [1]}, "TOKEN is not set"),
        ({"token": TOKEN, "operators": [1], "mode": "webhook", "webhook_url": "https://h/x"},
         "WEBHOOK_SECRET"),
    ],
)  # fmt: skip
def test_startup_refuses_unsafe_settings(
    telegram: dict[str, object], reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = settings_mod.Settings(telegram=settings_mod.TelegramSettings(**telegram))  # type: ignore[arg-type]
    assert app.main(cfg) == 2
    err = capsys.readouterr().err
    assert reason in err and TOKEN not in err


def test_help_names_each_command_once_with_its_arguments() -> None:
    lines = handlers.help_text().splitlines()
    assert lines[0] == "<b>gatehouse</b>"
    assert "/run &lt;pipeline&gt; — run a pipeline now" in lines
    assert (
        "/status [pipeline | chart] — every pipeline, one pipeline&#x27;s recent runs,"
        " or a chart of the week"
    ) in lines
    assert (
        "/pending [pipeline] — items awaiting approval, oldest first, to decide on together"
        in lines
    )
    assert len(lines) == 1 + len(handlers.COMMANDS)
    assert not [line for line in lines[1:] if line.count("/") != 1]  # no "/run: /run ..."


def test_a_command_naming_a_pipeline_whose_file_failed_names_its_errors() -> None:
    """/status city, /run city ... when city.yaml did not load: its errors, not 'unknown'."""
    error = "/p/city.yaml:7: nope: unknown field 'nope'"
    deps = kit.Deps(
        None, {}, None, auth.Gate([1], 0), KEY, None, datetime.now,  # type: ignore[arg-type]
        broken={"city": [error]},
    )  # fmt: skip
    context = types.SimpleNamespace(bot_data={"deps": deps}, args=["city"])
    with pytest.raises(kit.BadInput) as refused:
        kit.pipeline_arg(context, "status")  # type: ignore[arg-type]
    assert str(refused.value) == (
        "pipeline &#x27;city&#x27; did not load: its file has errors (gatehouse check lists"
        f" every file&#x27;s):\n  {render.esc(error)}"
    )
