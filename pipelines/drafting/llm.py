"""The LLM drafter: every provider call goes through the budget ledger and is paid for once.

    drafter = llm_drafter.LlmDrafter(store, pipeline, provider, price)
    result = await drafter.draft(item, now)      # a DraftResult, or drafters.DraftFailed

For the runtime, `choice.Drafters` picks each pipeline's drafter (pipelines/drafting/choice.py).

A draft is a paid call of its own (pipelines/drafting/paid.py: reserve, call, settle, and
what each provider outcome does to the claim and the item) under the `llm.draft`
endpoint, with the pipeline's prompt; a redraft (a replay, attempt 2 on) carries the
reviewer's note, and its card says so. No budget configured: the template drafter, with
a note on the card.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from pipelines.config import spec
from pipelines.drafting import calls, drafters, paid
from pipelines.providers import client as providers
from store.db import Store
from store.items import Item
from store.ledger import claims
from store.ledger import prices as ledger_prices
from store.review import followups

NO_BUDGET_NOTE = "no budget configured: template drafter used"


class LlmDrafter:
    """Drafts through one provider and model, with the ledger around every call."""

    def __init__(
        self,
        store: Store,
        pipeline: spec.Pipeline,
        provider: providers.ProviderClient,
        price: ledger_prices.Price,
        *,
        shared: paid.Shared | None = None,
    ) -> None:
        self._store = store
        self._paid = paid.PaidCall(
            store,
            pipeline.name,
            provider,
            price,
            _draft_call(pipeline),
            unpaid=drafters.TemplateDrafter(pipeline, note=NO_BUDGET_NOTE),
            shared=shared,
        )

    async def draft(self, item: Item, now: datetime) -> drafters.DraftResult:
        """Draft one item; the engine never drafts the same item twice at once. A redraft's
        card says which note it was drafted with."""
        # Only a redraft, a replay (attempt 2 on), carries a note: a first draft asks none.
        first = item.attempt == 1
        note = None if first else await followups.note(self._store, item.id, item.attempt)
        result = await self._paid.ask(item, now, note)
        if note is None:
            return result
        said = f"✍️ redrafted with the note: “{note}”"
        return dataclasses.replace(result, note=f"{said}\n{result.note}" if result.note else said)

    async def reused_by_replay(self, item: Item) -> claims.Claim | None:
        """The claim whose kept output a plain replay of the dropped `item` (attempt + 1,
        no note) shows with no provider call, found as that draft will find it."""
        return await self._paid.reused_by_replay(item)


def _draft_call(pipeline: spec.Pipeline) -> calls.Call:
    template = pipeline.draft.prompt_text
    if pipeline.draft.drafter != "llm" or template is None:
        raise ValueError(f"pipeline {pipeline.name} does not draft with an llm prompt")
    return calls.draft_call(template, pipeline.draft.output_schema, pipeline.draft.max_tokens)
