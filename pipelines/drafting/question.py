"""A triage's question: the pipeline's question to a cheap model about one entry, a paid
call of its own (pipelines/drafting/paid.py) under the `llm.triage` endpoint, so its keys
never meet a draft's. What the verdict does to the entry is the triage step's
(pipelines/drafting/steps.py).

    question = Question(store, pipeline.name, pipeline.triage, asker)   # choice.Drafters
    verdict = await question.ask(item, now)   # triage.Verdict, or why it could not be asked

Idempotency: a try's key is (pipeline, item, attempt, prompt version, try). A try whose
call may have happened (reserved, started, uncertain) is resumed under its own key, never
paid twice; only once a try has ended settled with no usable answer, or released, does a
later run (on hold) begin the next try under a new key.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from pipelines.config import triage
from pipelines.drafting import calls, drafters
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


class Asking(Protocol):
    """One try's paid call (a paid.PaidCall), or what says why none can be made."""

    async def ask(self, item: Item, now: datetime) -> drafters.DraftResult: ...


#: The paid call of one try of a triage (choice.Drafters binds the provider and price).
Asker = Callable[[calls.Call], Asking]


class NoBudget:
    """What answers a triage's paid call when no budget is configured: nothing can pay."""

    async def draft(self, item: Item, now: datetime) -> drafters.DraftResult:
        raise drafters.DraftFailed("no budget configured", reason="budget")


class CannotAsk:
    """A triage that cannot be asked (no provider, no price): on_failure decides."""

    def __init__(self, why: str) -> None:
        self._why = why

    async def ask(self, item: Item, now: datetime) -> drafters.DraftResult:
        raise drafters.DraftFailed(self._why, reason="triage")


def call_for(config: triage.TriageConfig, attempt_try: int) -> calls.Call:
    template = config.template()
    version = f"{calls.prompt_version(template)}.t{attempt_try}"
    return calls.Call(
        ENDPOINT, template, triage.SCHEMA, config.max_tokens, version, next_tries=False
    )


class Question:
    """The pipeline's triage question, asked of an entry once through the ledger."""

    def __init__(
        self, store: Store, pipeline: str, config: triage.TriageConfig, asker: Asker
    ) -> None:
        self._store = store
        self._pipeline = pipeline
        self.config = config
        self._asker = asker

    async def ask(self, item: Item, now: datetime) -> triage.Verdict:
        """The model's verdict; raises what the paid call raised (drafters.DraftFailed and
        its kin), or triage.InvalidVerdict for an answer that is not one."""
        attempt_try, begun = await self._store.read(self._try_sync, item)
        if attempt_try > 0 and not begun and self.config.on_failure == "pass":
            # An earlier try ended with no usable answer (a crash's call reconciled, say):
            # it may have been paid, and under pass the person decides rather than a second.
            raise drafters.DraftFailed("an earlier triage call ended without an answer")
        answer = await self._asker(call_for(self.config, attempt_try)).ask(item, now)
        return triage.read(answer.text)

    def _try_sync(self, conn: backend.Conn, item: Item) -> tuple[int, bool]:
        """The try to ask under and whether it has a claim already: the first with no
        claim, or the last unless it ended with nothing usable (then the next)."""
        last = 0
        for attempt_try in range(MAX_TRIES):
            call = call_for(self.config, attempt_try)
            key = calls.claim_key(self._pipeline, item.id, item.attempt, call.version)
            claim = claims.by_key_sync(conn, ENDPOINT, key)
            if claim is None:
                return attempt_try, False
            if not _ended_unusable(conn, claim):
                return attempt_try, True
            last = attempt_try
        return last, True  # out of tries: the last one answers (its failure, no new call)


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
