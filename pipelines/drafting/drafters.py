"""Drafters: what turns a fetched item into draft text.

    drafter = drafters.for_pipeline(pipeline, llm=None)
    result = await drafter.draft(item, now)

The template drafter is deterministic and free. The LLM drafter (pipelines/drafting/llm.py)
goes through the budget ledger and falls back to the template drafter, saying so on
the card, when no budget is configured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pipelines.config import spec
from pipelines.drafting import prompt as drafting
from store.items import Item


class DraftFailed(Exception):
    """The drafter could not produce an acceptable draft; the message says why.

    `reason` is a short tag (e.g. "budget", "provider", "invalid_output") and
    `raw` keeps a model's raw output for the operator to see.
    """

    def __init__(self, message: str, *, reason: str = "draft", raw: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.raw = raw


class DraftWaits(DraftFailed):
    """The item cannot be drafted now and must not fail: it waits in drafting, and each
    run tries it again (a triage held by `on_failure: hold`, say)."""


class AskAgain(DraftWaits):
    """The provider answered with an HTTP error and charged nothing (its claim settled at
    zero): the item waits in drafting, and its next run asks again under a new try."""


class Skipped(DraftFailed):
    """The pipeline's triage scored the item below its threshold: it ends skipped, the
    score and the model's reason (`verdict`) in its event; nothing is drafted."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="skipped")


class DraftHeld(DraftWaits):
    """The attempt's provider call may have happened and left no output: drafting it
    again could pay twice, so the item waits in drafting for an operator to settle
    budget claim `claim_id` (`gatehouse reconcile-claim`)."""

    def __init__(self, message: str, *, claim_id: int) -> None:
        super().__init__(message, reason="provider")
        self.claim_id = claim_id


class Parked(Exception):
    """A clean stop began while the draft waited for its turn of the model's client:
    nothing was held or asked, and the item stays in drafting for the next start."""


@dataclass(frozen=True)
class DraftResult:
    text: str
    provenance: dict[str, Any]
    cost_micros: int | None = None
    #: Said on the card, e.g. "no budget configured: template drafter used".
    note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: An image found while drafting (the article page's), for an item whose feed gave none.
    image_url: str | None = None
    #: The draft's tells, as kept beside its version (pipelines.voice.sidecar); None: none.
    tells: dict[str, Any] | None = None


class Drafter(Protocol):
    async def draft(self, item: Item, now: datetime) -> DraftResult: ...


def draft_item(item: Item) -> drafting.DraftItem:
    """The drafter's view of a stored item's payload."""
    payload = item.payload
    return drafting.DraftItem(
        title=str(payload.get("title", "")),
        text=str(payload.get("text", "")),
        link=payload.get("link"),
        pipeline=item.pipeline,
        summary=str(payload["summary"]) if "summary" in payload else None,
    )


class TemplateDrafter:
    """The deterministic drafter: the pipeline's template, or title + summary + link."""

    def __init__(self, pipeline: spec.Pipeline, note: str | None = None) -> None:
        self._template = (
            pipeline.draft.prompt_text if pipeline.draft.drafter == "template" else None
        )
        self._note = note

    async def draft(self, item: Item, now: datetime) -> DraftResult:
        text = drafting.template_draft(draft_item(item), self._template)
        if not text.strip():
            raise DraftFailed("the template produced an empty draft", reason="empty")
        return DraftResult(text, {"drafter": "template"}, cost_micros=0, note=self._note)
