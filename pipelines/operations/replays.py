"""Bringing a dropped item back, with its unshown LLM output or a fresh draft."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from pipelines.operations import review
from store import backend, items
from store.db import Store
from store.ledger import outputs as llm_outputs
from store.machine import State

if TYPE_CHECKING:  # the CLI reads operations without loading the engine
    from pipelines.service.scheduler import Scheduler


async def replay(
    store: Store,
    item_id: int,
    actor: str,
    now: datetime,
    *,
    force: bool = False,
    fresh: bool = False,
    scheduler: Scheduler | None = None,
) -> items.Item:
    """Bring a dropped item back to new (attempt + 1) and ask its pipeline to run.

    A filtered entry comes back past the filter (its event says so). An LLM output the
    provider already gave for this item and no card showed is drafted again without a
    new provider call; `fresh` refuses it (in the same transaction), so the new attempt
    pays for a new draft. The run request is persisted, so without a
    running scheduler (the CLI writing directly) the bot drafts the item at its next start.
    """

    def unit(conn: backend.Conn) -> items.Item:
        # Only intake filters, so a replayed entry is drafted whatever the filter says:
        # the event records that the operator overruled it.
        overruled = items.lock_sync(conn, item_id).state == State.FILTERED
        reason = f"replayed by {actor}" + (" past the filter" if overruled else "")
        reason += " with a fresh draft" if fresh else ""
        replayed = items.replay_sync(conn, item_id, actor, now, reason, force=force)
        if fresh:
            llm_outputs.refuse_unshown_sync(conn, item_id, f"a fresh draft was asked ({reason})")
        return replayed

    replayed = await store.write(unit)
    await review.ask_run(store, replayed.pipeline, now, scheduler)
    return replayed


async def unshown_drafts(store: Store, item_id: int) -> list[int]:
    """Budget claims whose LLM output for this item no card showed: a replay shows it
    without a new provider call, unless the operator asks for a fresh draft."""
    return await llm_outputs.unshown(store, item_id)
