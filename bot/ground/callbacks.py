"""callback_data for inline buttons: short, versioned, tagged with an HMAC.

    data = callbacks.encode(key, callbacks.Button("approve", item_id=12, attempt=1, version=3))
    button = callbacks.decode(key, data)      # raises InvalidButton for anything forged or garbled

Layout (at most 64 bytes, Telegram's limit): `1:<action>:<item>:<attempt>:<version>:<tag>`,
where <action> is one letter (and a digit 1-9 when it carries a number) and the tag is
the first 12 bytes of HMAC-SHA256 over everything before it, base64url.
The button carries no state of its own: the database decides whether the version it names
is still the one awaiting a decision, so buttons keep working across restarts as long as
the key stays the same (it is derived from the bot token unless set explicitly).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

from store.review import followups

#: Bump when the layout changes; older buttons are then refused with a clear answer.
FORMAT = "1"
#: Telegram's limit on callback_data, in bytes.
MAX_BYTES = 64
#: The largest item id, attempt or version a button may name (SQLite's largest integer).
MAX_NUMBER = 2**63 - 1
#: Bytes of HMAC kept: 96 bits is far beyond guessing through a rate-limited chat.
TAG_BYTES = 12

Action = Literal[
    "approve",
    "reject",
    "edit",
    "replay",
    "fresh",
    "retry",
    "show",
    "why",
    "other",
    "back",
    "undo",
    "redraft",
    "extend",
    "escalate",
    "all_approve",
    "all_reject",
    "yes_approve",
    "yes_reject",
    "cancel",
    "noimage",
    "not_charged",
    "charged",
    "list_claims",
    "approve_anyway",
]
_CODES: dict[Action, str] = {
    "approve": "a",
    "reject": "r",  # shows the reasons
    "edit": "e",
    "replay": "p",
    "fresh": "f",  # replay, paying for a new LLM draft instead of an unshown one
    "retry": "t",  # dispatch again after a permanent failure, with the same key
    "show": "s",  # point to the item's card, or send a fresh one
    "why": "w",  # reject with the preset reason numbered by `arg`
    "other": "o",  # reject with a typed reason
    "back": "b",  # the card's own buttons again
    "undo": "u",
    "redraft": "d",
    "extend": "x",  # give a waiting item its approval window once more
    "escalate": "E",  # bring in approval.escalate_to now (too few may approve)
    # A listed set: item_id is the list's id, version the number of items on it.
    "all_approve": "A",
    "all_reject": "R",
    "yes_approve": "Y",
    "yes_reject": "N",
    "cancel": "c",
    "noimage": "i",  # a new version without the image
    # An alert's uncertain claims: item_id is the alert's outbox row, version their number.
    "not_charged": "z",  # settle them at 0
    "charged": "g",  # settle them at the reserve each held
    "list_claims": "l",
    "approve_anyway": "k",  # approve a version past its block tells (audited)
}
_ACTIONS: dict[str, Action] = {code: action for action, code in _CODES.items()}
_REPLAYS: frozenset[Action] = frozenset({"replay", "fresh"})
#: The largest `arg` a button carries (a preset reason's number).
MAX_ARG = 9
_ARGS = frozenset(str(n) for n in range(1, MAX_ARG + 1))


class InvalidButton(ValueError):
    """The callback_data is not a button this bot made (forged, garbled or too old)."""


@dataclass(frozen=True)
class Button:
    action: Action
    item_id: int
    attempt: int
    version: int
    #: A small number the action needs (which preset reason); 0 when unused.
    arg: int = 0

    @property
    def shown(self) -> followups.Shown:
        return followups.Shown(self.item_id, self.attempt, self.version)


def derive_key(token: str) -> bytes:
    """A key for tags when none is configured: HMAC of a fixed label under the bot token."""
    return hmac.new(token.encode(), b"gatehouse callback_data v1", hashlib.sha256).digest()


def _tag(key: bytes, body: str) -> str:
    digest = hmac.new(key, body.encode(), hashlib.sha256).digest()[:TAG_BYTES]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def encode(key: bytes, button: Button) -> str:
    if not 0 <= button.arg <= MAX_ARG:
        raise ValueError(f"a button's arg is 0 to {MAX_ARG}, not {button.arg}")
    code = _CODES[button.action] + (str(button.arg) if button.arg else "")
    body = f"{FORMAT}:{code}:{button.item_id}:{button.attempt}:{button.version}"
    data = f"{body}:{_tag(key, body)}"
    if len(data.encode()) > MAX_BYTES:
        raise ValueError(f"callback_data would be {len(data)} bytes; Telegram allows {MAX_BYTES}")
    return data


def decode(key: bytes, data: str) -> Button:
    """Check the tag in constant time, then parse; any failure raises InvalidButton."""
    body, _, tag = data.rpartition(":")
    if not body or not hmac.compare_digest(tag.encode(), _tag(key, body).encode()):
        raise InvalidButton("this button was not made by this bot (bad or missing tag)")
    parts = body.split(":")
    if len(parts) != 5 or parts[0] != FORMAT:
        raise InvalidButton("this button comes from an older version of the bot")
    code, digits = parts[1][:1], parts[1][1:]
    action = _ACTIONS.get(code)
    arg = int(digits) if digits in _ARGS else 0 if not digits else None
    item_id, attempt, version = (_number(part) for part in parts[2:])
    # A replay offer can name version 0 (an item no card has shown a draft of yet);
    # a decision is always on a drafted version.
    lowest = 0 if action in _REPLAYS else 1
    if action is None or arg is None:
        raise InvalidButton("this button's data is malformed")
    if not (item_id and attempt and version is not None and version >= lowest):
        raise InvalidButton("this button's data is malformed")
    return Button(action, item_id, attempt, version, arg)


def _number(text: str) -> int | None:
    """0 to MAX_NUMBER in ASCII digits, else None (str.isdigit alone accepts "²")."""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_NUMBER)):
        return None
    number = int(text)
    return number if number <= MAX_NUMBER else None
