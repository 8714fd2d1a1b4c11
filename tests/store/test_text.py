"""Text the store can keep on both backends: a lone surrogate (SQLite's UTF-8) and NUL
(PostgreSQL's text) are named by `unstorable` and replaced by `clean`."""

from __future__ import annotations

import sqlite3
from datetime import datetime

import pytest

from store import db, items
from store.backends import text
from store.ledger import outputs as llm_outputs


@pytest.mark.parametrize(
    ("value", "reason", "cleaned"),
    [
        ("plain", None, "plain"),
        ("naïve ✓", None, "naïve ✓"),
        ("a\ud800b", "a lone surrogate U+D800 at character 1", "a\ufffdb"),
        ("ab\x00c", "a NUL character (U+0000) at character 2", "ab\ufffdc"),
        ("é\x00\udfff", "a NUL character (U+0000) at character 1", "é\ufffd\ufffd"),
        ("\ud83d\ude00\x00", "a NUL character (U+0000) at character 2", "😀\ufffd"),
    ],
)
def test_unstorable_names_what_cannot_be_kept_and_clean_replaces_it(
    value: str, reason: str | None, cleaned: str
) -> None:
    assert text.unstorable(value) == reason
    assert text.clean(value) == cleaned
    assert text.unstorable(text.clean(value)) is None


async def test_a_provider_output_with_nul_is_kept_cleaned_on_both_backends(
    store: db.Store, now: datetime
) -> None:
    """PostgreSQL refuses NUL in text outright: the settlement beside it must still commit."""

    def unit(conn: sqlite3.Connection) -> None:
        at = int(now.timestamp() * 1000)
        conn.execute(
            "INSERT INTO claims (id, idem_hash, request_digest, pipeline, state,"
            " provider_allowed, reserved_micros, actual_micros, lease_until, created_at,"
            " updated_at) VALUES (1, 'h1', 'd', 'news', 'settled', 1, 100, 10, 0, ?, ?)",
            (at, at),
        )
        reply = llm_outputs.Reply("Launch\x00 day", "m\x00", "req\x00", "bad\x00")
        llm_outputs.keep_sync(conn, 1, reply, now)

    await store.write(unit)
    kept = await llm_outputs.get(store, 1)
    assert kept is not None
    assert (kept.text, kept.model, kept.request_id, kept.error) == (
        "Launch\ufffd day", "m\ufffd", "req\ufffd", "bad\ufffd"
    )  # fmt: skip


async def test_a_payload_with_nul_round_trips_as_a_json_escape(
    store: db.Store, now: datetime
) -> None:
    made = await store.write(items.create_sync, "news", "feed", "nul", {"title": "a\x00b"}, now)
    assert made is not None
    assert "\\u0000" in made.payload_json and "\x00" not in made.payload_json
    assert (await items.get(store, made.id)).payload == {"title": "a\x00b"}
