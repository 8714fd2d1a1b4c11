"""A pipeline's steps for each item it drafts, in the order the engine walks them: the
triage, the full text, the draft. Each step is a small object with one method, `run`,
that takes the work so far and hands on the work for the next.

    plan = steps.Plan(drafter, triage=steps.Triage(question), voice=steps.Voice(rules))
    plan = plan.reading(fulltext.Reading(fetcher, pipeline, lengths))   # the engine adds it
    result = await steps.walk(plan.steps(), item, now)   # or drafters.Skipped, DraftWaits...

Ahead of them all, the pipeline's filter runs as intake records an entry (in the same
transaction: pipelines/runs/intake.py), so an entry it drops never reaches these steps.

- triage (pipelines/drafting/question.py asks the paid question): score >= threshold,
  the card shows the score and reason; below it, `drafters.Skipped` (the engine ends the
  item skipped); triage cannot run (no budget configured, budget spent, the provider
  down or answering an HTTP error after its retries, an unusable answer, an earlier try
  that ended with none): `on_failure: pass` drafts and the card says it was not
  triaged, never asking a second time; `hold` raises `drafters.DraftWaits` (the item
  waits in drafting, tried again each run); a replay (attempt > 1) is the operator's
  overruling: it goes past triage;
- full text (pipelines/runs/fulltext.py): the linked article read as the item's text;
- draft: the pipeline's drafter, the template's or the LLM's;
- voice: the draft's tells under the pipeline's rules (pipelines/voice: no model, no
  network), kept beside its version and shown on its card.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pipelines.config import triage
from pipelines.drafting import drafters
from pipelines.drafting import question as triage_question
from pipelines.voice import lint, sidecar
from store.items import Item


@dataclass(frozen=True)
class Work:
    """An item on its way through the steps."""

    #: The item as the next step reads it (the full text replaces its payload's text).
    item: Item
    now: datetime
    #: Lines for the card ahead of the draft's own note (the triage's), and after it.
    ahead: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    #: The article page's image, for an item whose feed gave none.
    image_url: str | None = None
    #: The draft, once the draft step has run.
    result: drafters.DraftResult | None = None


class Step(Protocol):
    async def run(self, work: Work) -> Work: ...


@dataclass(frozen=True)
class Plan:
    """A pipeline's steps. It drafts as a drafter does (`draft`), walking them."""

    drafter: drafters.Drafter
    triage: Step | None = None
    full_text: Step | None = None
    voice: Step | None = None

    def steps(self) -> tuple[Step, ...]:
        """The order, in one place: the triage first (an entry it skips is never fetched
        nor drafted), then the article, read ahead of the draft's budget claim, then the
        draft and its tells."""
        listed = (self.triage, self.full_text, Draft(self.drafter), self.voice)
        return tuple(step for step in listed if step is not None)

    def reading(self, full_text: Step) -> Plan:
        return dataclasses.replace(self, full_text=full_text)

    async def draft(self, item: Item, now: datetime) -> drafters.DraftResult:
        return await walk(self.steps(), item, now)


def plan_of(drafter: drafters.Drafter) -> Plan:
    """The plan a pipeline's drafter stands for: itself, or a drafter's alone."""
    return drafter if isinstance(drafter, Plan) else Plan(drafter)


async def walk(steps: tuple[Step, ...], item: Item, now: datetime) -> drafters.DraftResult:
    """Run the steps in order; the draft, with every step's lines on its card."""
    work = Work(item, now)
    for step in steps:
        work = await step.run(work)
    assert work.result is not None, "a plan ends with its draft step"
    result, note = work.result, work.result.note
    if not work.ahead and not work.after and work.image_url is None:
        return result
    if work.ahead or work.after:
        note = "\n".join((*work.ahead, *((note,) if note else ()), *work.after))
    return dataclasses.replace(result, note=note, image_url=work.image_url or result.image_url)


@dataclass(frozen=True)
class Draft:
    """The pipeline's drafter, drafting the item as the steps before left it."""

    drafter: drafters.Drafter

    async def run(self, work: Work) -> Work:
        return dataclasses.replace(work, result=await self.drafter.draft(work.item, work.now))


@dataclass(frozen=True)
class Voice:
    """Finds the draft's tells, kept beside its version and shown on its card."""

    rules: lint.Rules

    async def run(self, work: Work) -> Work:
        assert work.result is not None, "the voice step follows the draft step"
        kept = sidecar.of(lint.lint(work.result.text, self.rules))
        return dataclasses.replace(work, result=dataclasses.replace(work.result, tells=kept))


@dataclass(frozen=True)
class Triage:
    """Asks the triage's question, and lets on the entries that pass."""

    question: triage_question.Question

    async def run(self, work: Work) -> Work:
        if work.item.attempt > 1:  # a replay: the operator overruled triage
            return work
        config = self.question.config
        try:
            verdict = await self.question.ask(work.item, work.now)
        except drafters.AskAgain as exc:  # an error answer, not charged: triage did not run
            return _cannot_run(config, work, f"{exc}")
        except drafters.DraftWaits:
            raise  # a try whose call may have been paid: never a second one
        except drafters.DraftFailed as exc:
            return _cannot_run(config, work, triage_question.of_the_answer(str(exc), exc.reason))
        except triage.InvalidVerdict as exc:
            return _cannot_run(config, work, str(exc))
        if not verdict.passes(config.threshold):
            raise drafters.Skipped(verdict.said())
        return _ahead(work, f"🔎 {verdict.said()}")


def _cannot_run(config: triage.TriageConfig, work: Work, why: str) -> Work:
    if config.on_failure == "hold":
        raise drafters.DraftWaits(
            f"triage could not run ({why}); the entry waits (on_failure: hold)",
            reason="triage",
        )
    return _ahead(work, f"⚠️ not triaged: {why}")


def _ahead(work: Work, line: str) -> Work:
    return dataclasses.replace(work, ahead=(*work.ahead, line))
