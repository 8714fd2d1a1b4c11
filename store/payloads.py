"""What an outbox row carries, one frozen dataclass per kind, checked when it is read.

    outbox.enqueue_sync(conn, "dispatch", name, payloads.Dispatch(12, 1, 2, name).to_json(), now)
    job = payloads.Dispatch.of(row)          # BadPayload if the row is not a well-formed one

An alert the store raises itself (a budget threshold, an uncertain claim, an overrun)
carries facts under `about`, never words: the bot words it when it sends it
(`bot/chat/alerts.py`). Alerts queued by pipelines carry their `text`. Keys a reader does
not know are kept in the row and ignored here, so an older or newer row still reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, get_args

from store import errors

Level = Literal["info", "warning", "error"]
#: The facts an alert raised by the store may be about.
About = Literal["budget_threshold", "claim_uncertain", "claims_uncertain", "claim_overrun"]

P = TypeVar("P", bound="_Payload")


class BadPayload(errors.StoreError):
    """An outbox row's payload is not what its kind carries."""


class Row(Protocol):
    """What `of` reads from an `outbox.Row` (named by shape: outbox imports this module)."""

    @property
    def id(self) -> int: ...

    @property
    def kind(self) -> str: ...

    @property
    def payload(self) -> dict[str, Any]: ...


class _Payload:
    kind: str

    @classmethod
    def from_json(cls: type[P], data: Mapping[str, Any]) -> P:
        """The payload from a row's JSON object; BadPayload names the first wrong field."""
        values = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise BadPayload(f"{cls.kind} payload: {f.name!r} is missing")
                continue
            values[f.name] = _checked(cls.kind, f.name, data[f.name], str(f.type))
        return cls(**values)

    @classmethod
    def of(cls: type[P], row: Row) -> P:
        if row.kind != cls.kind:
            raise BadPayload(f"outbox row {row.id} is of kind {row.kind}, not {cls.kind}")
        try:
            return cls.from_json(row.payload)
        except BadPayload as exc:
            raise BadPayload(f"outbox row {row.id}: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        """The row's JSON object; optional fields left empty are left out."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                pass  # required: always written
            elif value in (None, "", {}, ()):
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class Dispatch(_Payload):
    """One approved draft version to deliver to the pipeline's target."""

    kind = "dispatch"
    item_id: int
    attempt: int
    version: int
    #: The same as the row's target; rows from older versions may lack it.
    pipeline: str = ""


@dataclass(frozen=True)
class Card(_Payload):
    """An approval card for one draft version (its text is joined from the draft row)."""

    kind = "card"
    pipeline: str
    attempt: int
    version: int
    title: str = ""
    link: str | None = None
    #: The version's image, shown as the card's link preview above its text.
    image_url: str | None = None
    drafter: str = "?"
    cost_micros: int | None = None
    note: str | None = None
    quorum: int = 1
    duplicate_of: int | None = None
    duplicate_reason: str | None = None
    #: A copy for these chats alone (an escalation); none: the pipeline's operators.
    chats: tuple[int, ...] = ()
    #: The version's tells line ("✍️ 2 tells: delve · em dashes (5)"); "": none.
    tells: str = ""
    #: Why too few may approve this version ("needs 2 approvals from people other than ...").
    short_of: str | None = None
    #: Buttons beyond the card's own (the bot builds them): ESCALATE_BUTTONS.
    buttons: str = ""
    #: A copy sent again (a chat lost the card, a restart): the card row it copies. In each
    #: chat holding an earlier copy of the version it answers that copy, which a CardEdit
    #: with `again_as` then points here.
    again_of: int | None = None
    text: str = ""

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        del out["text"]  # a card does not repeat its draft: readers join the draft's text
        return out


@dataclass(frozen=True)
class CardEdit(_Payload):
    """What a card shown earlier now says: the item's state and a status line."""

    kind = "card_edit"
    item_id: int
    attempt: int
    version: int
    state: str
    status: str = ""
    decided_by: tuple[int, ...] = ()
    #: Buttons the card gains (the bot builds them): RETRY_BUTTONS, REPLAY_BUTTONS.
    buttons: str = ""
    #: Until when (ISO 8601) the decision can be undone; the card keeps its Undo button.
    undo_until: str | None = None
    #: The item's pipeline: whose operators see the edit.
    pipeline: str = ""
    #: The card row that sent the card again: the earlier copies in the chats it reached
    #: say so and lose their buttons; decisions then edit the new copy there.
    again_as: int | None = None


@dataclass(frozen=True)
class Alert(_Payload):
    """A message to the operators: words (`text`), or facts the bot words (`about`)."""

    kind = "alert"
    level: Level = "error"
    text: str = ""
    item_id: int | None = None
    about: About | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    #: The pipeline it is about: a row for the operators goes to its approvers (a
    #: reminder, a digest); any alert goes to its group when its cards go to one.
    pipeline: str = ""
    #: A reminder answers the card of this attempt and version (a reply to it).
    attempt: int | None = None
    reply_to_version: int | None = None
    #: A digest's list: the offer its buttons decide on, and how many items it lists.
    offer: int | None = None
    count: int | None = None
    #: Buttons under an alert about one item (the bot builds them): DECIDE_BUTTONS under an
    #: SLA warning, REPLAY_BUTTONS under a breach or an expiry.
    buttons: str = ""


#: `buttons` of a card edit: Retry (a dispatch that failed for good).
RETRY_BUTTONS = "retry"
#: `buttons` of an alert or a card edit: Approve, Reject and Extend (an SLA warning).
DECIDE_BUTTONS = "decide"
#: `buttons` of an alert or a card edit: Replay (an expired card, a breach).
REPLAY_BUTTONS = "replay"
#: `buttons` of a card or a card edit: the card's own and Escalate (too few may approve).
ESCALATE_BUTTONS = "escalate"


_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "str": (str,),
    "dict[str, Any]": (dict,),
}


def _checked(kind: str, name: str, value: Any, annotation: str) -> Any:
    """`value` if it fits `annotation` (the few shapes payloads use), else BadPayload."""
    options = [part.strip() for part in annotation.split("|")]
    if value is None and "None" in options:
        return None
    for option in options:
        if option == "Level" and value in get_args(Level):
            return value
        if option == "About" and value in get_args(About):
            return value
        if option == "tuple[int, ...]" and isinstance(value, list | tuple):
            if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
                return tuple(value)
        elif isinstance(value, _TYPES.get(option, ())) and not isinstance(value, bool):
            return value
    wanted = annotation.replace("Level", " or ".join(get_args(Level)))
    wanted = wanted.replace("About", " or ".join(get_args(About)))
    raise BadPayload(f"{kind} payload: {name!r} must be {wanted}, not {value!r}"[:300])
