"""Bringing a dropped item back: the LLM draft a replay would reuse, or a fresh one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from pipelines.operations import review
from store import backend, items
from store.db import Store
from store.items.machine import State
from store.ledger import outputs as llm_outputs

if TYPE_CHECKING:  # the CLI reads operations without loading the engine
    from pipelines.drafting import drafters
    from pipelines.service.scheduler import Scheduler


@dataclass(frozen=True)
class KeptDraft:
    """A draft the provider already wrote for a dropped item and no card showed: a plain
    replay shows it with no new provider call."""

    claim_id: int
    #: What that draft cost, so about what a new one would cost again; None while its
    #: claim is uncertain (the provider reported no usage).
    cost_micros: int | None


@dataclass(frozen=True)
class Replay:
    """An operator's ask to bring a dropped item back: `actor` names them in the events;
    `force` replays a dispatched item too; `fresh` pays for a new draft."""

    item_id: int
    actor: str
    force: bool = False
    fresh: bool = False


async def replay(
    store: Store, asked: Replay, now: datetime, *, scheduler: Scheduler | None = None
) -> items.Item:
    """Bring a dropped item back to new (attempt + 1) and ask its pipeline to run.

    A filtered entry comes back past the filter (its event says so). An LLM output the
    provider already gave for this item and no card showed is drafted again without a
    new provider call; `fresh` refuses it (in the same transaction), so the new attempt
    pays for a new draft. The run request is persisted, so without a
    running scheduler (the CLI writing directly) the bot drafts the item at its next start.
    """
    item_id, actor, fresh = asked.item_id, asked.actor, asked.fresh

    def unit(conn: backend.Conn) -> items.Item:
        # Only intake filters, so a replayed entry is drafted whatever the filter says:
        # the event records that the operator overruled it.
        item = items.lock_sync(conn, item_id)
        overruled = item.state == State.FILTERED
        reason = f"replayed by {actor}" + (" past the filter" if overruled else "")
        reason += " with a fresh draft" if fresh else ""
        way: items.Way = "force" if asked.force else "replay"
        replayed = items.apply_one(conn, items.Move(item, State.NEW, actor, now, reason, way=way))
        if fresh:
            llm_outputs.refuse_unshown_sync(conn, item_id, f"a fresh draft was asked ({reason})")
        return replayed

    replayed = await store.write(unit)
    await review.ask_run(store, replayed.pipeline, now, scheduler)
    return replayed


async def kept_draft(item: items.Item, drafter: drafters.Drafter) -> KeptDraft | None:
    """The draft a plain replay of `item` would show without a new provider call, or None.

    Asked of the drafter that will draft the replay (past its pipeline's triage, which a
    replay skips), so the offer is what the replay does: a triage's answer, another
    prompt's or model's draft, or one a card showed is never offered.
    """
    from pipelines.drafting import llm, steps  # the CLI reads operations without the engine

    drafter = steps.plan_of(drafter).drafter  # past the pipeline's triage
    if not isinstance(drafter, llm.LlmDrafter):
        return None  # the template drafter: nothing is paid, nothing kept
    claim = await drafter.reused_by_replay(item)
    return None if claim is None else KeptDraft(claim.id, claim.actual_micros)
