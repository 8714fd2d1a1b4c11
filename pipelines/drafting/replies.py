"""What a paid draft call gave, written once: the output kept and its claim settled (or
left uncertain when the usage is unknown), and the failure each unusable outcome means.

    replies = Replies(store, provider.settings, price, system, max_tokens, schema)
    record = replies.of_failure(work, item, prompt, exc)   # a Record, run when the store answers
    claim, kept = await replies.accept(work, item, reply, now)

The LLM drafter (pipelines.drafting.llm) makes the call; a Record is what it keeps in
memory while the store fails, so the paid reply is written once the store answers.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pipelines.drafting import drafters
from pipelines.drafting.calls import ERROR_ANSWER, max_input_tokens
from pipelines.providers import client as providers
from pipelines.text import validation
from store import backend, errors, ledger
from store.backends import text as store_text
from store.db import Store
from store.items import Item
from store.ledger import claims
from store.ledger import outputs as llm_outputs
from store.ledger import prices as ledger_prices
from store.ledger import settle as ledger_settle

log = logging.getLogger(__name__)

#: What a provider call gave, to be recorded once the store answers: the write (keep
#: the output, settle or leave uncertain) and what the item gets then.
Record = Callable[[datetime], Awaitable[drafters.DraftResult]]


@dataclass(frozen=True)
class Replies:
    """Records the outcomes of one drafter's calls (its provider, price and call shape)."""

    store: Store
    settings: providers.ProviderSettings
    price: ledger_prices.Price
    system: str
    max_tokens: int
    schema: dict[str, Any] | None

    def of_failure(self, work: claims.Work, item: Item, prompt: str, exc: Exception) -> Record:
        """The record of a call that gave no usable reply, and the failure it means."""

        async def not_called(at: datetime) -> drafters.DraftResult:
            await self._not_charged(work, item, f"not charged: {exc}", at)
            raise drafters.DraftFailed(str(exc), reason="provider")

        async def error_answer(at: datetime) -> drafters.DraftResult:
            # An HTTP error answer carries no usage and is not billed: the answer itself
            # is the evidence, and the next run asks again under a new key.
            await self._not_charged(work, item, f"{ERROR_ANSWER}{exc}", at)
            raise drafters.AskAgain(str(exc), reason="provider")

        async def unusable(at: datetime) -> drafters.DraftResult:
            assert isinstance(exc, providers.ProviderBadOutput)
            model = self.settings.model
            message = f"the provider's reply was unusable: {exc}"
            await self.record(work, item, exc.raw_text, model, exc.request_id, None, message, at)
            raise drafters.DraftFailed(message, reason="invalid_output", raw=exc.raw_text)

        async def maybe_charged(at: datetime) -> drafters.DraftResult:
            await ledger.fail(self.store, work.id, f"the provider may have charged: {exc}", at)
            raise drafters.DraftFailed(str(exc), reason="provider")

        async def too_large(at: datetime) -> drafters.DraftResult:
            # Paid, and the usage sits in the body not read: settled at the worst case.
            usage = ledger_prices.Usage(max_input_tokens(self.system, prompt), self.max_tokens)
            message = (
                f"the provider's reply was larger than GATEHOUSE_LLM__MAX_REPLY_BYTES "
                f"({self.settings.max_reply_bytes} bytes) and was not read; "
                "its claim is settled at the worst case"
            )
            model = self.settings.model
            request_id = getattr(exc, "request_id", None)
            await self.record(work, item, "", model, request_id, usage, message, at)
            raise drafters.DraftFailed(message, reason="invalid_output")

        if isinstance(exc, providers.ProviderErrorAnswer):
            return error_answer
        if isinstance(exc, providers.ProviderNotCalled):
            return not_called
        if isinstance(exc, providers.ProviderTooLarge):
            return too_large
        if isinstance(exc, providers.ProviderBadOutput):
            return unusable
        if not isinstance(exc, providers.ProviderUncertain):  # a bug after the request left
            log.exception("draft of item %s: unexpected error in the provider call", item.id)
        return maybe_charged

    async def accept(
        self, work: claims.Work, item: Item, reply: providers.Completion, now: datetime
    ) -> tuple[claims.Claim, providers.Completion]:
        """Keep a reply and settle its claim; the claim and the reply as kept (cleaned), or
        DraftFailed when the reply is not a usable draft (kept all the same)."""
        error = _unstorable(reply.text)
        reply = dataclasses.replace(
            reply,
            text=store_text.clean(reply.text),
            model=store_text.clean(reply.model),
            request_id=reply.request_id and store_text.clean(reply.request_id),
        )
        if error is None:
            try:
                validation.validate(reply.text, self.schema)
            except validation.InvalidDraft as exc:
                error = store_text.clean(str(exc))
        usage = (
            ledger_prices.Usage(reply.input_tokens, reply.output_tokens)
            if reply.input_tokens is not None and reply.output_tokens is not None
            else None
        )
        claim = await self.record(
            work, item, reply.text, reply.model, reply.request_id, usage, error, now, reply
        )
        if error is not None:
            raise drafters.DraftFailed(error, reason="invalid_output", raw=reply.text)
        return claim, reply

    async def record(
        self,
        work: claims.Work,
        item: Item,
        text: str,
        model: str,
        request_id: str | None,
        usage: ledger_prices.Usage | None,
        error: str | None,
        now: datetime,
        reply: providers.Completion | None = None,
    ) -> claims.Claim:
        """Keep the output and settle (usage known) or mark uncertain: one transaction."""
        evidence = _evidence(model, request_id, reply)
        # A usable draft is never longer than max_kept_chars (see its setting): only an
        # unusable reply is cut, so a huge one does not sit in the database whole.
        text = text[: self.settings.max_kept_chars]

        kept = llm_outputs.Reply(text, model, request_id, error)

        def unit(conn: backend.Conn) -> tuple[claims.Claim, str | None]:
            if usage is None:
                llm_outputs.keep_sync(conn, work.id, kept, now)
                reason = f"charged, but the usage is unknown ({evidence}); reconcile with the bill"
                return claims.fail_sync(conn, work.id, reason, now), None
            spent = ledger_settle.Actual(ledger_prices.cost(usage, self.price), evidence, usage)
            settled = ledger_settle.complete_sync(
                conn, work.id, spent, item.content_hash, now, kept
            )
            return settled.claim, settled.content_changed

        claim, changed = await self.store.write(unit)
        if changed:
            raise drafters.DraftFailed(changed, reason="content_changed")
        return claim

    async def _not_charged(self, work: claims.Work, item: Item, why: str, now: datetime) -> None:
        """Nothing was generated: settle at 0 with `why` as evidence (the hold is released)."""
        nothing = ledger.Actual(0, why[: ledger_settle.MAX_EVIDENCE], ledger_prices.Usage(0, 0))
        try:
            await ledger.complete(self.store, work.id, nothing, item.content_hash, now)
        except errors.Conflict as conflict:  # the item changed: the claim stays uncertain
            log.warning("claim %s not settled: %s", work.id, conflict)


def _unstorable(text: str) -> str | None:
    problem = store_text.unstorable(text)
    return None if problem is None else f"the reply holds text that cannot be stored: {problem}"


def _evidence(model: str, request_id: str | None, reply: providers.Completion | None) -> str:
    text = f"request {request_id}" if request_id else f"{model} reply without a request id"
    if reply is not None and reply.uncertain_attempts:
        text += f"; {reply.uncertain_attempts} earlier attempt(s) got a 5xx after sending"
    return text[: ledger_settle.MAX_EVIDENCE]
