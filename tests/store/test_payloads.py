"""Outbox payloads: one frozen dataclass per kind, checked when read."""

from __future__ import annotations

from datetime import datetime

import pytest

from store import db, outbox, payloads


def test_each_kind_round_trips_through_its_json() -> None:
    for payload in (
        payloads.Dispatch(1, 2, 3, "news"),
        payloads.CardEdit(1, 2, 3, "approved", "✅ approved by 7", (7, 8)),
        payloads.Alert(level="warning", text="hello", item_id=4),
        payloads.Alert(about="claim_overrun", facts={"claim_id": 1}),
    ):
        assert type(payload).from_json(payload.to_json()) == payload


def test_a_card_leaves_its_text_to_the_draft_row() -> None:
    card = payloads.Card("news", 1, 2, text="the draft")
    assert "text" not in card.to_json()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"attempt": 1, "version": 1, "pipeline": "n"}, "'item_id' is missing"),
        ({"item_id": "1", "attempt": 1, "version": 1, "pipeline": "n"}, "must be int, not '1'"),
        ({"item_id": True, "attempt": 1, "version": 1, "pipeline": "n"}, "must be int, not True"),
        ({"item_id": 1, "attempt": 1, "version": None, "pipeline": "n"}, "'version' must be int"),
    ],
)
def test_a_malformed_dispatch_says_which_field(data: dict[str, object], message: str) -> None:
    with pytest.raises(payloads.BadPayload, match=message):
        payloads.Dispatch.from_json(data)


def test_an_alert_level_and_fact_must_be_known_ones() -> None:
    with pytest.raises(payloads.BadPayload, match="info or warning or error, not 'loud'"):
        payloads.Alert.from_json({"level": "loud"})
    with pytest.raises(payloads.BadPayload, match="'about' must be"):
        payloads.Alert.from_json({"about": "weather"})
    with pytest.raises(payloads.BadPayload, match="'decided_by' must be"):
        payloads.CardEdit.from_json(
            {"item_id": 1, "attempt": 1, "version": 1, "state": "x", "decided_by": ["7"]}
        )


def test_keys_a_reader_does_not_know_are_ignored() -> None:
    data = {"item_id": 1, "attempt": 1, "version": 1, "pipeline": "n", "later": "field"}
    assert payloads.Dispatch.from_json(data) == payloads.Dispatch(1, 1, 1, "n")


async def test_of_reads_a_row_of_its_own_kind_only(store: db.Store, now: datetime) -> None:
    key = "alert-once"
    first = await store.write(
        lambda c: outbox.alert_sync(c, payloads.Alert(text="hi", level="warning"), now, key=key)
    )
    again = await store.write(
        lambda c: outbox.alert_sync(c, payloads.Alert(text="hi"), now, key=key)
    )
    assert first is not None and again is None  # one alert per key
    row = await store.read(outbox.get_sync, first)
    assert payloads.Alert.of(row) == payloads.Alert(level="warning", text="hi")
    with pytest.raises(
        payloads.BadPayload, match=f"outbox row {first} is of kind alert, not dispatch"
    ):
        payloads.Dispatch.of(row)
