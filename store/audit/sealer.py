"""Sealing the audit chain: unsealed events get their place and hash, a batch at a time.

    sealed = await sealer.seal(store)               # how many were sealed (0: none waited)
    age, waiting = await watch.age(store, now)      # seconds the oldest has waited, or 0.0

A transition writes its event unsealed (events.append), so writers never wait on each
other for the chain's head. The leader seals (pipelines.service.seal_loop): one batch, in the
order the events were written, in one transaction, so a crash leaves the whole batch
sealed or none of it. On SQLite the batch is one more unit in the writer's queue.

Only the leader seals, but a deposed leader may still be finishing a batch: each
sealer first takes the sealing lock (`lock_head`, an advisory lock on PostgreSQL), then reads
the head and the unsealed events afresh, so the second seals after the first. The
unique index on `seq` stays as the last guard: a fork of the chain cannot commit.
"""

from __future__ import annotations

import json
from collections import deque
from datetime import datetime

from store import backend, errors
from store.audit import events
from store.backends.core import Store

#: Events sealed per transaction at most: a backlog (after a leader change, or a tick's
#: thousands of moves) is sealed in several short transactions, one after another. On
#: SQLite each is one unit of the single writer, and an operator's tap waits for the unit
#: in flight: 500 events hash in about 10 ms, 2,000 held a tap 40-100 ms behind them.
BATCH = 500


def seal_sync(conn: backend.Conn, limit: int = BATCH) -> int:
    """Seal up to `limit` of the oldest unsealed events onto the sealed head."""
    conn.execute(events.Q["lock_head"]).fetchall()
    cursor = conn.execute(events.Q["unsealed"], {"limit": limit})
    waiting = cursor.fetchall()
    if not waiting:
        return 0
    head = conn.execute(events.Q["sealed_head"]).fetchone()
    seq, prev_hash = (head[0], head[1]) if head else (0, events.GENESIS)
    seals: list[dict[str, object]] = []
    for row in waiting:
        seq += 1
        fields = {**dict(row), "id": seq, "prev_hash": prev_hash}
        prev_hash = events.compute_hash(fields)
        seals.append({"id": row["id"], "seq": seq, "hash": prev_hash})
    # One statement for the batch: one round trip to a database server, not one per event.
    sealed = conn.execute(events.Q["seal"], {"seals": json.dumps(seals)}).rowcount
    if sealed != len(seals):  # another sealer got there first: seal again from its head
        raise errors.Conflict(f"{len(seals) - sealed} of {len(seals)} events were sealed meanwhile")
    return sealed


async def seal(store: Store, limit: int = BATCH) -> int:
    # The leader passes every 100 ms: a pass with nothing to seal is one read, not a
    # transaction that locks the head (four statements on a database server).
    if not await store.read(_any_unsealed):
        return 0
    return await store.write(seal_sync, limit)


def _any_unsealed(conn: backend.Conn) -> bool:
    return conn.execute(events.Q["any_unsealed"]).fetchone() is not None


class Watch:
    """How long the oldest unsealed event has waited for the sealer, from this process's
    looks (`age_sync`, one caller at a time).

    An event's own time is when its change happened, not when it was written: a long
    tick stamps every event with the tick's start, and a fresh event would look minutes
    late. The watch dates each event by the first look that could have seen it (its id
    at or below that look's newest unsealed id), so an age is right to within the time
    between two looks, and a backlog the sealer works through still shows its age.
    """

    #: Looks kept at most; past it the newest is overwritten (the oldest dates stay).
    MAX_LOOKS = 1000

    def __init__(self) -> None:
        #: (when, the newest unsealed id then), oldest first, newest ids increasing.
        self._looks: deque[tuple[datetime, int]] = deque()

    def age_sync(self, conn: backend.Conn, now: datetime) -> tuple[float, int]:
        """Seconds the oldest unsealed event has waited (0.0: none waits), and how many wait."""
        oldest, newest, waiting = conn.execute(events.Q["unsealed_span"]).fetchone()
        if oldest is None:
            self._looks.clear()
            return 0.0, 0
        if not self._looks or self._looks[-1][1] < newest:
            if len(self._looks) >= self.MAX_LOOKS:
                self._looks.pop()
            self._looks.append((now, newest))
        while self._looks[0][1] < oldest:  # that look came before the oldest was written
            self._looks.popleft()
        return max((now - self._looks[0][0]).total_seconds(), 0.0), waiting

    async def age(self, store: Store, now: datetime) -> tuple[float, int]:
        return await store.read(self.age_sync, now)
