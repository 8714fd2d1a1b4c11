"""A paid call: one question to the provider through the budget ledger, paid for once.
A draft (pipelines/drafting/llm.py) and a triage's question (pipelines/drafting/question.py)
are each a PaidCall of their own, under their own endpoint and keys.

    paid = PaidCall(store, "news", provider, price, call, unpaid=fallback)
    result = await paid.ask(item, now)   # a DraftResult, or drafters.DraftFailed

One call is, within a turn of the model's client (`max_concurrent_calls` at once, so
the drafts past it wait before anything is held): begin (key = pipeline, item, attempt
and prompt version) holds the worst case; start_provider authorizes the one call; the
call; then ONE transaction keeps the output (store/ledger/outputs.py) and settles the
claim, or leaves it uncertain when the cost is unknown. Before any of that, a kept
output of the item that no card showed (a crash after the answer, or a replay of a
dropped item) is used with no new call. A call that gets its turn once a clean stop
began (`parked`) begins nothing and raises drafters.Parked: no claim, no call, and the
item waits in drafting for the next start.

Resuming after a crash (the engine never drafts one item twice at once, so any claim
it finds past reserve was left by a crash): reserved, even past its lease, is started
under the same key; started becomes uncertain; uncertain with no output raises
DraftHeld (the item waits; its episode's alert offers Not charged / Charged, as does
reconcile-claim); settled with no output (an operator settled it) begins the next try
of the draft under a key of its own (`key:r1`, ...), so the item goes on with no
replay; released fails the item saying what to do (replay). On a store
other workers share, a claim started and still within its lease may be another
worker's call in flight (that worker paused past its run's lease): the item waits in
drafting for its reply, with no second call, and claim recovery makes the claim
uncertain only once its lease lapses. A claim another worker started between this
one's begin and its start_provider is treated the same way.

A store fault (errors.PASSING) while recording what a call gave is not the item's: the
record is kept in memory (`unrecorded`, shared across ticks) and the fault raised, so
the item waits in drafting; the next draft of that claim writes it, with no new call.

What each provider outcome does to the claim and the item (written by
pipelines.drafting.replies):

- a reply with usage: settled at the price-table cost; the draft goes to approval, or,
  if it fails validation (not JSON, schema violation, text the store cannot hold: a
  lone surrogate, a NUL), the item fails with reason `invalid_output` and the raw output
  kept (cleaned) for the operator;
- a reply without usage: uncertain (the cost is unknown until reconciled); the draft is
  still used, and the card says so;
- ProviderNotCalled / ProviderRejected: nothing was generated, so the claim settles at
  0 (the hold is released: a started claim can only end settled or uncertain);
- ProviderErrorAnswer (an HTTP error answer after the retries: 5xx, 429...): not
  charged, so settled at 0 with the answer as evidence; the item waits in drafting
  (`drafters.AskAgain`) and its next run begins the attempt's next try (a new key);
- ProviderUncertain (no reply within the timeout after sending, a connection lost
  mid-reply, a 5xx from a provider that bills errors): uncertain; the item fails
  (`provider`);
- ProviderBadOutput (2xx with an unusable body): charged but the usage is unreadable, so
  uncertain; the item fails (`invalid_output`) with the body kept;
- ProviderTooLarge (2xx past max_reply_bytes, not read): charged, so settled at the
  worst case held; the item fails (`invalid_output`) saying which setting to raise;
- of any reply, at most max_kept_chars characters are kept (more than any usable draft);
- no budget configured: `unpaid` answers (for a draft, the template drafter, with a note
  on the card);
- budget exceeded: the item fails with reason `budget` (the engine queues the alert).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pipelines.drafting import calls, drafters, replies
from pipelines.drafting import prompt as drafting
from pipelines.providers import client as providers
from store import backend, errors, ledger, units
from store.db import Store
from store.items import Item
from store.ledger import claims
from store.ledger import outputs as llm_outputs
from store.ledger import prices as ledger_prices
from store.ledger.machine import ClaimState

log = logging.getLogger(__name__)

#: Earlier attempts whose unshown output a replay may reuse (the newest claim decides).
REUSE_LOOKBACK = 10


@dataclass(frozen=True)
class Shared:
    """What the paid calls of one process share (choice.Drafters holds one)."""

    #: Read once after the provider answers, to date the settlement; None: use `now`.
    clock: Callable[[], datetime] | None = None
    #: By claim id, what a call of this process gave while the store failed (a lost
    #: connection, a full disk): the next tick records it instead of calling again.
    unrecorded: dict[int, replies.Record] = field(default_factory=dict)
    #: True once a clean stop began: a call that gets its turn then begins nothing.
    parked: Callable[[], bool] = lambda: False


class PaidCall:
    """One kind of call through one provider and model, with the ledger around every call."""

    def __init__(
        self,
        store: Store,
        pipeline: str,
        provider: providers.ProviderClient,
        price: ledger_prices.Price,
        call: calls.Call,
        *,
        unpaid: drafters.Drafter,
        shared: Shared | None = None,
    ) -> None:
        self._store = store
        self._pipeline = pipeline
        self._provider = provider
        self._price = price
        self._kind = call
        self._max_tokens = call.max_tokens
        self._template = call.template
        self._schema = call.schema
        self._system = calls.system_prompt(self._schema)
        self._lease = calls.lease_for(provider.settings)
        self._replies = replies.Replies(
            store, provider.settings, price, self._system, self._max_tokens, self._schema
        )
        #: What answers when no budget is configured (the ledger allows no provider call).
        self._unpaid = unpaid
        shared = shared or Shared()
        self._clock, self._unrecorded, self._parked = shared.clock, shared.unrecorded, shared.parked

    async def ask(self, item: Item, now: datetime, note: str | None = None) -> drafters.DraftResult:
        """The call's answer for this item (with a reviewer's `note` on an earlier draft,
        if any), paid once; the engine never asks the same item twice at once."""
        # Before the hold: the lease starts with the turn, once the provider has room.
        async with self._provider.turn(self._max_tokens):
            if self._parked():  # the stop came while this draft waited: hold nothing, ask nothing
                raise drafters.Parked(f"item {item.id} waits in drafting for the next start")
            return await self._draft_in_turn(item, self._later(now), note)

    async def _draft_in_turn(
        self, item: Item, now: datetime, note: str | None
    ) -> drafters.DraftResult:
        prompt = drafting.render_prompt(self._template, drafters.draft_item(item))
        if note is not None:
            prompt = calls.with_note(prompt, note)
        reused = await self._reused(item, note, None)
        if reused is not None:
            return reused
        work = await self._begin(item, prompt, now)
        reused = await self._reused(item, note, work)
        if reused is not None:
            return reused
        if not work.provider_allowed:
            return await self._unpaid.draft(item, now)
        kept_here = self._unrecorded.pop(work.id, None)
        if kept_here is not None and work.state == ClaimState.STARTED:
            # This process made (or was cleared to make) the call and kept what came of
            # it while the store failed: record that now, with no second call.
            return await kept_here(self._later(now))
        if work.state != ClaimState.RESERVED:
            # This attempt already got past the gate once: never a second paid call.
            return await self._resume(work, item, now)
        if now >= work.lease_until:  # reserved before a crash: nothing was authorized yet
            await self._store.write(claims.renew_sync, work.id, now, self._lease)
        try:
            await ledger.start_provider(self._store, work.id, now)
        except (errors.IllegalTransition, errors.LeaseExpired) as exc:
            moved = await ledger.get(self._store, work.id)
            if moved.state != ClaimState.RESERVED:  # another worker got past the gate first
                return await self._resume(claims.Work.of(moved, replayed=True), item, now)
            raise drafters.DraftFailed(
                f"the provider call was not authorized: {exc}", reason="provider"
            ) from None
        except errors.PASSING:
            # The authorization may have committed; no call went out, so if the next
            # tick finds the claim started, this process may make its one call then.
            self._unrecorded[work.id] = lambda at: self._call(work, item, prompt, at)
            raise
        return await self._call(work, item, prompt, now)

    def _request(self) -> dict[str, Any]:
        return {
            "model": self._provider.settings.model,
            "max_tokens": self._max_tokens,
            "prompt_version": self._kind.version,
        }

    async def _reused(
        self, item: Item, note: str | None, work: claims.Work | None
    ) -> drafters.DraftResult | None:
        """A kept output of the item that no draft showed (answered before a crash, or
        before a replay), as the draft: no call. Looked for before begin (`work` None)
        from a second attempt on: an earlier attempt's answer may stand in, and begin
        would hold the worst case for a new claim. A first attempt has no earlier one and
        only its own key to look at: begin finds that key's claim (and writes nothing
        then), so it is looked for only once begin has replayed it. A redraft's note
        must reach the model: no earlier answer stands in for it."""
        first = item.attempt == 1
        wanted = work.replayed and first if work is not None else not first
        kept = await self._reusable(item) if wanted and note is None else None
        if kept is None:
            return None
        claim, output = kept
        # A write cut off by a lost connection may have committed after all.
        self._unrecorded.pop(claim.id, None)
        return self._result(output.text, output.model, output.request_id, claim)

    async def reused_by_replay(self, item: Item) -> claims.Claim | None:
        """The claim whose kept output a plain replay of the dropped `item` (attempt + 1,
        no note) shows with no provider call, found as that draft will find it."""
        kept = await self._reusable(dataclasses.replace(item, attempt=item.attempt + 1))
        return None if kept is None else kept[0]

    async def _reusable(self, item: Item) -> tuple[claims.Claim, llm_outputs.Output] | None:
        """A kept output of this item's latest claim (latest try) that no draft showed."""
        first = max(1, item.attempt - REUSE_LOOKBACK + 1)
        digest = claims.request_digest(item.pipeline, item.id, self._request())

        def unit(conn: backend.Conn) -> tuple[claims.Claim, llm_outputs.Output] | None:
            keys = (  # lazily: the newest attempt with a claim decides
                calls.latest_key_sync(conn, self._kind, self._pipeline, item.id, attempt)
                for attempt in range(item.attempt, first - 1, -1)
            )
            return llm_outputs.reusable_sync(conn, self._kind.endpoint, keys, item, digest)

        return await self._store.read(unit)

    async def _begin(self, item: Item, prompt: str, now: datetime) -> claims.Work:
        """The claim of this attempt's current try: a try settled with no answer kept (the
        provider answered an HTTP error, or an operator settled a call cut off) is past,
        and the next one begins (no try is ever paid twice)."""
        for attempt_try in range(calls.MAX_TRIES if self._kind.next_tries else 1):
            work = await self._begin_try(item, prompt, now, attempt_try)
            if not work.replayed or work.state != ClaimState.SETTLED:
                return work
            if not await self._store.read(calls.asks_again_sync, work.id):
                return work
        return work  # out of tries: the last one answers (its failure, no new call)

    async def _begin_try(
        self, item: Item, prompt: str, now: datetime, attempt_try: int
    ) -> claims.Work:
        request = self._request()
        worst = ledger_prices.worst_case(
            self._price,
            calls.max_input_tokens(self._system, prompt),
            self._max_tokens,
        )
        key = calls.claim_key(
            self._pipeline, item.id, item.attempt, self._kind.version, attempt_try
        )
        endpoint = self._kind.endpoint
        call = ledger.Call(key, endpoint, request, worst, item.pipeline, item.id, self._lease)
        try:
            return await ledger.begin(self._store, call, now)
        except errors.BudgetExceeded as exc:
            raise drafters.DraftFailed(f"budget exceeded: {exc}", reason="budget") from None
        except errors.Conflict as exc:
            raise drafters.DraftFailed(str(exc), reason="conflict") from None

    async def _call(
        self, work: claims.Work, item: Item, prompt: str, now: datetime
    ) -> drafters.DraftResult:
        try:
            reply = await self._provider.complete(
                self._system,
                prompt,
                max_tokens=self._max_tokens,
                json_output=self._schema is not None,
            )
        except Exception as exc:
            outcome = self._replies.of_failure(work, item, prompt, exc)
            return await self._recorded(work, outcome, self._later(now))
        record: replies.Record = lambda at: self._accepted(work, item, reply, at)  # noqa: E731
        try:
            return await self._recorded(work, record, self._later(now))
        except (drafters.DraftFailed, *errors.PASSING):
            raise
        except Exception as exc:  # a bug: the call was paid, keep the hold
            log.exception("draft of item %s: the provider's reply could not be recorded", item.id)
            reason = f"the provider answered but its reply could not be recorded: {exc!r}"
            await ledger.fail(self._store, work.id, reason[:1000], self._later(now))
            raise drafters.DraftFailed(reason, reason="internal") from None

    async def _accepted(
        self, work: claims.Work, item: Item, reply: providers.Completion, now: datetime
    ) -> drafters.DraftResult:
        claim, kept = await self._replies.accept(work, item, reply, now)
        return self._result(kept.text, kept.model, kept.request_id, claim)

    async def _recorded(
        self, work: claims.Work, record: replies.Record, now: datetime
    ) -> drafters.DraftResult:
        """Run the write that records what the call gave. When the store fails (a lost
        connection, a full disk), keep it in memory for the next tick and raise: the item
        waits in drafting, and the paid reply is written once the store answers."""
        try:
            return await record(now)
        except errors.PASSING:
            self._unrecorded[work.id] = record
            raise

    async def _resume(self, work: claims.Work, item: Item, now: datetime) -> drafters.DraftResult:
        """The attempt's claim got past reserve earlier: reuse its output, or say why not."""
        if work.state == ClaimState.STARTED and self._store.shared and now < work.lease_until:
            # Maybe another worker's call, still in flight: a worker paused past its
            # run's lease (a GC pause, a VM stall) answers late. The item waits for that
            # reply; if none comes, claim recovery makes the claim uncertain at its lease.
            raise drafters.DraftHeld(in_flight_reason(work), claim_id=work.id)
        if work.state == ClaimState.STARTED:
            # Its process died (this process alone opens the store, or the call outlived
            # its lease); it may have been charged, so the hold stays (uncertain).
            await ledger.fail(self._store, work.id, held_reason(item.id), now)
        elif work.state == ClaimState.RELEASED:
            raise drafters.DraftFailed(
                f"budget claim {work.id} was released before the provider was called (its "
                "lease ran out before the draft resumed); nothing was spent: replay the item "
                "to draft it",
                reason="provider",
            )
        return await self._reuse(work)

    async def _reuse(self, work: claims.Work) -> drafters.DraftResult:
        kept = await llm_outputs.get(self._store, work.id)
        claim = await ledger.get(self._store, work.id)
        if kept is None and claim.state == ClaimState.UNCERTAIN:
            raise drafters.DraftHeld(
                f"budget claim {work.id} for this attempt is uncertain and kept no output: "
                "the provider call may have been charged, and calling again could pay twice",
                claim_id=work.id,
            )
        if kept is None:
            raise drafters.DraftFailed(
                f"budget claim {work.id} for this attempt was settled without an output "
                f"({claim.evidence}): replay the item to draft it as a new attempt",
                reason="provider",
            )
        if kept.error is not None:
            raise drafters.DraftFailed(kept.error, reason="invalid_output", raw=kept.text)
        return self._result(kept.text, kept.model, kept.request_id, claim)

    def _result(
        self, text: str, model: str, request_id: str | None, claim: claims.Claim
    ) -> drafters.DraftResult:
        provenance = {
            "drafter": "llm",
            "model": model,
            "claim": claim.id,
            "request_id": request_id,
            "prompt_version": self._kind.version,
        }
        note = None
        if claim.state != ClaimState.SETTLED:
            note = (
                f"cost unknown: the provider reported no usage; budget claim {claim.id} "
                "holds the worst case until reconciled"
            )
        return drafters.DraftResult(text, provenance, cost_micros=claim.actual_micros, note=note)

    def _later(self, now: datetime) -> datetime:
        return now if self._clock is None else max(now, self._clock())


def in_flight_reason(work: claims.Work) -> str:
    """Why an item whose claim another worker started waits in drafting."""
    return (
        f"budget claim {work.id} is started by another worker whose provider call may "
        f"still answer (its lease runs to {units.when_exact(work.lease_until)}); the "
        "item waits in drafting for that reply, and no second call is made"
    )


def held_reason(item_id: int) -> str:
    """Why a claim found started on resume is uncertain, as its episode's alert tells it."""
    return (
        f"the process stopped during its provider call; item {item_id} waits in drafting "
        "until this claim is settled, then is drafted again by itself"
    )
