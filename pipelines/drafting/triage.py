"""Triage before drafting: the pipeline's question to a cheap model, paid through the
ledger exactly as a draft is (the LlmDrafter makes the call under its own endpoint).

    drafter = triage.Triaged(inner, asker, pipeline.triage)   # choice.Drafters builds it
    result = await drafter.draft(item, now)   # the inner draft, or drafters.Skipped

- score >= threshold: the inner drafter drafts; the card shows the score and reason;
- score < threshold: `drafters.Skipped` (the engine ends the item skipped);
- triage cannot run (no budget configured, budget spent, the provider down or answering
  an HTTP error after its retries, an unusable answer, an earlier try that ended with
  none): `on_failure: pass` drafts and the card says it was not triaged, never asking a
  second time; `hold` raises `drafters.DraftWaits` (the item waits in drafting, tried
  again each run);
- a replay (attempt > 1) is the operator's overruling: it goes past triage.

Idempotency: a try's key is (pipeline, item, attempt, prompt version, try). A try whose
call may have happened (reserved, started, uncertain) is resumed under its own key, never
paid twice; only once a try has ended settled with no usable answer, or released, does a
later run (on hold) begin the next try under a new key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime

from pipelines.drafting import calls, drafters
from pipelines.runs import triage
from store import backend
from store.db import Store
from store.items import Item
from store.ledger import claims
from store.ledger import outputs as llm_outputs
from store.ledger.machine import ClaimState

#: The ledger endpoint of triage calls: its keys never meet a draft's.
ENDPOINT = "llm.triage"
#: Tries of one attempt's triage at most (each after the last ended with nothing usable).
MAX_TRIES = 50

#: The LlmDrafter for one try of a triage (choice.Drafters binds the provider and price).
Asker = Callable[[calls.Call], drafters.Drafter]


class NoBudget:
    """The fallback when no budget is configured: triage cannot be paid for."""

    async def draft(self, item: Item, now: datetime) -> drafters.DraftResult:
        raise drafters.DraftFailed("no budget configured", reason="budget")


def call_for(config: triage.TriageConfig, attempt_try: int) -> calls.Call:
    template = config.template()
    version = f"{calls.prompt_version(template)}.t{attempt_try}"
    return calls.Call(ENDPOINT, template, triage.SCHEMA, config.max_tokens, version)


class Triaged:
    """A drafter that asks the triage first, then lets `inner` draft what passed."""

    def __init__(
        self,
        store: Store,
        pipeline: str,
        config: triage.TriageConfig,
        inner: drafters.Drafter,
        asker: Asker,
    ) -> None:
        self._store = store
        self._pipeline = pipeline
        self._config = config
        self._inner = inner
        self._asker = asker

    @property
    def inner(self) -> drafters.Drafter:
        return self._inner

    def drafting_with(self, inner: drafters.Drafter) -> Triaged:
        """The same triage in front of another drafter."""
        return Triaged(self._store, self._pipeline, self._config, inner, self._asker)

    async def draft(self, item: Item, now: datetime) -> drafters.DraftResult:
        if item.attempt > 1:  # a replay: the operator overruled triage
            return await self._inner.draft(item, now)
        try:
            verdict = await self._judge(item, now)
        except drafters.AskAgain as exc:  # an error answer, not charged: triage did not run
            return await self._cannot_run(item, now, f"{exc}")
        except drafters.DraftWaits:
            raise  # a try whose call may have been paid: never a second one
        except drafters.DraftFailed as exc:
            return await self._cannot_run(item, now, of_the_answer(str(exc), exc.reason))
        except triage.InvalidVerdict as exc:
            return await self._cannot_run(item, now, str(exc))
        if not verdict.passes(self._config.threshold):
            raise drafters.Skipped(verdict.said())
        return _noted(await self._inner.draft(item, now), f"🔎 {verdict.said()}")

    async def _judge(self, item: Item, now: datetime) -> triage.Verdict:
        attempt_try, begun = await self._store.read(self._try_sync, item)
        if attempt_try > 0 and not begun and self._config.on_failure == "pass":
            # An earlier try ended with no usable answer (a crash's call reconciled, say):
            # it may have been paid, and under pass the person decides rather than a second.
            raise drafters.DraftFailed("an earlier triage call ended without an answer")
        answer = await self._asker(call_for(self._config, attempt_try)).draft(item, now)
        return triage.read(answer.text)

    def _try_sync(self, conn: backend.Conn, item: Item) -> tuple[int, bool]:
        """The try to ask under and whether it has a claim already: the first with no
        claim, or the last unless it ended with nothing usable (then the next)."""
        last = 0
        for attempt_try in range(MAX_TRIES):
            call = call_for(self._config, attempt_try)
            key = calls.claim_key(self._pipeline, item.id, item.attempt, call.version)
            claim = claims.by_key_sync(conn, ENDPOINT, key)
            if claim is None:
                return attempt_try, False
            if not _ended_unusable(conn, claim):
                return attempt_try, True
            last = attempt_try
        return last, True  # out of tries: the last one answers (its failure, no new call)

    async def _cannot_run(self, item: Item, now: datetime, why: str) -> drafters.DraftResult:
        if self._config.on_failure == "hold":
            raise drafters.DraftWaits(
                f"triage could not run ({why}); the entry waits (on_failure: hold)",
                reason="triage",
            )
        return _noted(await self._inner.draft(item, now), f"⚠️ not triaged: {why}")


#: A draft's validation words ("the draft is empty") as said of a triage answer: the
#: answer is checked as a draft is, but nothing was drafted.
_AS_DRAFT = {"the draft is empty": "the triage model's answer was empty"}
_SUBJECTS = ("the draft ", "the output ", "the provider's reply ", "the reply ")


def of_the_answer(said: str, reason: str | None) -> str:
    """Why a triage call failed, about the triage: an unusable answer is the triage
    model's answer, never "the draft" (which is not written yet)."""
    if reason != "invalid_output":
        return said
    if said in _AS_DRAFT:
        return _AS_DRAFT[said]
    for subject in _SUBJECTS:
        if said.startswith(subject):
            return "the triage model's answer " + said.removeprefix(subject)
    return f"the triage model's answer was unusable: {said}"


def _ended_unusable(conn: backend.Conn, claim: claims.Claim) -> bool:
    if claim.state == ClaimState.RELEASED:
        return True
    if claim.state != ClaimState.SETTLED:
        return False
    kept = llm_outputs.get_sync(conn, claim.id)
    return kept is None or kept.error is not None


def _noted(result: drafters.DraftResult, note: str) -> drafters.DraftResult:
    return dataclasses.replace(result, note=f"{note}\n{result.note}" if result.note else note)
