"""A pipeline's `approval:` block: who may decide on a draft, how many must agree, how long
they have, and where the cards go. Checked against the configured operators when those are
known (`spec.LoadContext`): a quorum nobody can reach is an error in the file, not a
draft that waits forever. What one vote decides is pipelines.approval.rule.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pipelines.config import timing

#: What Reject offers when a pipeline lists no reasons of its own.
DEFAULT_REJECT_REASONS = ("off-topic", "inaccurate", "tone", "duplicate")


class ApprovalConfig(BaseModel):
    """Who may decide on a draft, how many must agree, and how long they have."""

    model_config = ConfigDict(extra="forbid")

    #: Telegram user ids allowed to decide; empty means every configured operator.
    operators: list[int] = Field(default_factory=list)
    quorum: int = Field(default=1, ge=1, validate_default=True)
    window: timing.Interval = timedelta(hours=24)
    #: The reasons Reject offers as buttons (besides "other…", a typed reply).
    reject_reasons: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(
        default_factory=lambda: list(DEFAULT_REJECT_REASONS), max_length=6
    )
    #: How long an approve or a reject can be undone (the dispatch waits); 0s: no undo.
    undo_window: timing.Interval = timedelta(seconds=10)
    #: Four eyes: whoever wrote a version may not approve it (default: on from quorum 2).
    separate_editor: bool | None = None
    #: Remind the approvers once when an item has waited this long.
    remind_after: timing.Interval | None = None
    #: Bring in `escalate_to` once an item has waited this long.
    escalate_after: timing.Interval | None = None
    escalate_to: list[int] = Field(default_factory=list)
    #: How many times an operator may extend one item's window (Extend on the SLA warning).
    max_extensions: int = Field(default=1, ge=0, le=10)
    #: One card per item in this group or supergroup (its id, or its @username), instead
    #: of a card in each operator's private chat. Default: GATEHOUSE_TELEGRAM__CARDS_CHAT.
    chat: int | Annotated[str, Field(pattern=r"^@[A-Za-z][A-Za-z0-9_]{3,31}$")] | None = None
    #: The forum topic for the cards: its message_thread_id, or a name the bot creates once.
    topic: int | Annotated[str, Field(min_length=1, max_length=128)] | None = None
    #: Send one message listing what waits at these times, instead of a card per item.
    digest: timing.ScheduleField | None = None
    _approvers: tuple[int, ...] = PrivateAttr(default=())

    @property
    def four_eyes(self) -> bool:
        return self.separate_editor if self.separate_editor is not None else self.quorum >= 2

    @property
    def approvers(self) -> tuple[int, ...]:
        """Who may decide: the listed operators that are bot operators, else every bot
        operator (known when the file was loaded with them); empty: not known."""
        return self._approvers

    @model_validator(mode="after")
    def _resolve_approvers(self, info: ValidationInfo) -> ApprovalConfig:
        context = info.context if isinstance(info.context, dict) else {}
        configured = set(context.get("operators") or ())
        listed = self.operators
        self._approvers = tuple(
            [o for o in listed if o in configured]
            if listed and configured
            else listed or sorted(configured)
        )
        return self

    @model_validator(mode="after")
    def _escalation_complete(self) -> ApprovalConfig:
        if (self.escalate_after is None) != (not self.escalate_to):
            raise ValueError("escalate_after and escalate_to go together: set both or neither")
        if self.digest is not None and self.digest.kind != "cron":
            raise ValueError('digest must be a 5-field cron expression, like "0 9 * * *"')
        if self.undo_window > timedelta(minutes=10):
            raise ValueError("undo_window must be at most 10m: the dispatch waits for it")
        if isinstance(self.chat, int) and self.chat >= 0:
            raise ValueError(
                f"approval.chat {self.chat} is not a group: a group's id is negative "
                "(-100... for a supergroup); leave it out for cards in private chats"
            )
        if self.topic is not None and self.chat is None:
            raise ValueError("approval.topic needs approval.chat: the forum the topic is in")
        return self

    @field_validator("quorum", mode="after")
    @classmethod
    def _quorum_reachable(cls, value: int, info: ValidationInfo) -> int:
        listed = set(info.data.get("operators") or [])
        context = info.context if isinstance(info.context, dict) else {}
        configured = set(context.get("operators") or ())
        # Only configured operators reach the bot: a listed id outside them never votes.
        may = listed & configured if listed and configured else listed or configured
        if (listed or configured) and value > len(may):
            who = (
                "bot operators (GATEHOUSE_TELEGRAM__OPERATORS)"
                if not listed
                else "approval.operators that are bot operators"
                if configured
                else "approval.operators"
            )
            raise ValueError(
                f"quorum {value} can never be reached: {len(may)} {who} may approve;"
                f" use a quorum from 1 to {len(may)}"
                if may
                else "no operator may approve: none of approval.operators is a bot operator"
                " (GATEHOUSE_TELEGRAM__OPERATORS)"
            )
        return value

    @field_validator("window", mode="after")
    @classmethod
    def _positive_window(cls, value: timedelta) -> timedelta:
        return timing.positive(value)

    @field_validator("escalate_to", mode="after")
    @classmethod
    def _escalate_to_operators(cls, value: list[int], info: ValidationInfo) -> list[int]:
        context = info.context if isinstance(info.context, dict) else {}
        configured = set(context.get("operators") or ())
        # Only bot operators reach the bot: anyone else could never decide.
        strangers = sorted(set(value) - configured) if configured else []
        if strangers:
            raise ValueError(
                f"{', '.join(map(str, strangers))} not among the bot operators"
                " (GATEHOUSE_TELEGRAM__OPERATORS): they could never decide"
            )
        return value
