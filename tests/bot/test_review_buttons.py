"""The buttons of decisions beyond one tap: what they carry and when they show."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from bot.cards import keyboards, review_handlers
from bot.ground import callbacks
from pipelines.operations import review
from store import payloads
from store.review.followups import Shown
from tests.pipelines.test_review import pipeline

KEY = b"k" * 32


def retag(body: str) -> str:
    """`body` with a valid tag: what only a holder of the key could make."""
    digest = hmac.new(KEY, body.encode(), hashlib.sha256).digest()[: callbacks.TAG_BYTES]
    return f"{body}:{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"


def test_a_preset_reason_travels_as_a_digit_under_the_tag() -> None:
    button = callbacks.Button("why", 12, 1, 3, 5)
    data = callbacks.encode(KEY, button)
    assert data.startswith("1:w5:12:1:3:") and len(data.encode()) <= callbacks.MAX_BYTES
    assert callbacks.decode(KEY, data) == button
    # Another reason with the old tag is refused: the digit is covered by the tag.
    with pytest.raises(callbacks.InvalidButton, match="not made by this bot"):
        callbacks.decode(KEY, data.replace(":w5:", ":w4:"))


@pytest.mark.parametrize("code", ["w0", "w12", "w-1", "wx", "a²"])
def test_a_malformed_number_is_refused_even_when_tagged(code: str) -> None:
    with pytest.raises(callbacks.InvalidButton, match="malformed"):
        callbacks.decode(KEY, retag(f"1:{code}:12:1:3"))


def test_an_arg_out_of_range_is_never_encoded() -> None:
    with pytest.raises(ValueError, match="0 to 9"):
        callbacks.encode(KEY, callbacks.Button("why", 1, 1, 1, 10))


def labels(markup: object) -> list[str]:
    assert markup is not None
    return [b.text for row in markup.inline_keyboard for b in row]  # type: ignore[attr-defined]


def test_reject_offers_the_pipelines_reasons_then_other_and_back() -> None:
    markup = keyboards.reasons_keyboard(
        KEY, pipeline(reject_reasons=["a", "b", "c"]), Shown(1, 1, 1)
    )
    assert labels(markup) == ["❌ a", "❌ b", "❌ c", "✍️ other…", "← back"]
    whys = [callbacks.decode(KEY, str(b.callback_data)) for b in markup.inline_keyboard[0]]
    assert [(w.action, w.arg) for w in whys] == [("why", 0), ("why", 1)]


def card_edit(data: dict[str, object]) -> payloads.CardEdit:
    return payloads.CardEdit.from_json(data)


def test_a_decided_card_shows_undo_while_it_lasts_and_redraft_for_an_llm_draft() -> None:
    p = pipeline()
    llm = p.model_copy(update={"draft": p.draft.model_copy(update={"drafter": "llm"})})
    edit = {"item_id": 4, "attempt": 1, "version": 2, "state": "rejected"}
    assert keyboards.decided_keyboard(KEY, card_edit(edit), p) is None
    assert labels(keyboards.decided_keyboard(KEY, card_edit(edit), llm)) == ["🔄 Redraft"]
    timed = edit | {"undo_until": "2026-01-01T00:00:10+00:00"}
    assert labels(keyboards.decided_keyboard(KEY, card_edit(timed), llm)) == [
        "↩️ Undo",
        "🔄 Redraft",
    ]
    approved = timed | {"state": "approved"}
    assert labels(keyboards.decided_keyboard(KEY, card_edit(approved), llm)) == ["↩️ Undo"]
    assert keyboards.decided_keyboard(KEY, card_edit(edit | {"state": "new"}), llm) is None


def test_a_list_of_one_says_it_and_the_confirmation_names_the_count() -> None:
    assert labels(keyboards.listed_keyboard(KEY, 7, 1)) == ["✅ Approve it", "❌ Reject it"]
    assert labels(keyboards.listed_keyboard(KEY, 7, 3))[0] == "✅ Approve all 3"
    confirm = keyboards.confirm_keyboard(KEY, 7, 3, "reject")
    assert labels(confirm) == ["❌ Yes, reject 3", "Cancel"]
    yes = callbacks.decode(KEY, str(confirm.inline_keyboard[0][0].callback_data))
    assert (yes.action, yes.item_id, yes.version) == ("yes_reject", 7, 3)


def test_approve_all_counts_a_vote_toward_a_quorum_apart_from_a_decision() -> None:
    result = review.ListedResult(
        "approve", decided=[4], voted=[(5, "1 of 2; waiting for operator:12")],
        refused=[(6, "nothing changed: it is rejected")],
    )  # fmt: skip
    assert review_handlers.listed_summary(result, 3) == (
        "✅ approved 1 of 3; 1 vote recorded, still waiting\n"
        "• item 5: vote recorded, 1 of 2; waiting for operator:12\n"
        "• item 6 not approved: nothing changed: it is rejected"
    )
    assert result.changed == [4, 5]
