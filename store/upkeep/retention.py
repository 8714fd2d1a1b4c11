"""Retention: what is worth keeping only for a while is pruned after `StoreConfig.retention`.

    pruned = await retention.prune(store, now)     # the runtime's sweep calls this

Pruned: sent messages (cards, card edits, alerts) once their item has ended,
stored LLM outputs once their claim is over, and handled Telegram update ids after
`updates.KEEP` (Telegram no longer sends them again by then). Kept for good: events (the audit
chain), items, drafts, votes, claims and dispatch rows (the record of what went
out, which `gatehouse reconcile` compares dispatch folders with). Each batch is
its own short write, so a tap never waits behind a long delete; a SIGKILL
between batches leaves only rows the next sweep prunes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from store import backend, outbox
from store.backends.core import Store
from store.ledger import outputs as llm_outputs
from store.review import updates

#: Rows one write deletes at most (a few milliseconds of the writer's time).
BATCH = 500

_Pruner = Callable[[backend.Conn, datetime, int], int]


@dataclass(frozen=True)
class Pruned:
    messages: int
    llm_outputs: int
    #: Telegram update ids handled long enough ago that Telegram cannot send them again.
    updates: int = 0


async def _prune_all(store: Store, pruner: _Pruner, before: datetime, batch: int) -> int:
    total = 0
    while True:
        deleted = await store.write(pruner, before, batch)
        total += deleted
        if deleted < batch:
            return total


async def prune(store: Store, now: datetime, batch: int = BATCH) -> Pruned:
    """Delete what has outlived the store's retention age, `batch` rows per write."""
    before = now - store.config.retention
    return Pruned(
        messages=await _prune_all(store, outbox.prune_sent_sync, before, batch),
        llm_outputs=await _prune_all(store, llm_outputs.prune_sync, before, batch),
        updates=await _prune_all(store, updates.prune_sync, now, batch),
    )
