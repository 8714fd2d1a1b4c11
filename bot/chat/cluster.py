"""The workers sharing the store and their leader, as /status and `gatehouse status` show
them.

    found = await cluster.read(store, now, ttl)
    cluster.lines(found)      # plain text lines; Telegram escapes them (render.esc)

A worker is alive while its heartbeat is younger than the leader's lease TTL (it
beats every quarter of it), silent after that, and stopped after a clean stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.chat import render
from pipelines.service import leader as leader_mod
from store import units
from store.cluster import heartbeats, leases
from store.db import Store

#: Workers listed at most (the most recently started first).
SHOWN = 20


@dataclass(frozen=True)
class Cluster:
    at: datetime
    workers: list[heartbeats.Worker]
    lease: leases.Lease | None
    #: The leader's lease TTL in seconds: a worker silent for longer is not alive.
    ttl_s: float

    @property
    def leader(self) -> str | None:
        """The worker holding a live lease, if any."""
        lease = self.lease
        return lease.holder if lease is not None and lease.live(self.at) else None

    def state(self, worker: heartbeats.Worker) -> str:
        if worker.stopped_at is not None:
            return "stopped"
        return "alive" if worker.alive(self.at, timedelta(seconds=self.ttl_s)) else "silent"


async def read(store: Store, now: datetime, ttl: timedelta) -> Cluster:
    found = await heartbeats.recent(store, now)
    lease = await leases.get(store, leader_mod.LEASE)
    return Cluster(now, found, lease, ttl.total_seconds())


def lines(found: Cluster) -> list[str]:
    """How many workers are alive, `leader: <id> (term n)`, then one line per worker;
    nothing for a lone process, whose leader and lease are itself (one restarted after a
    clean stop is still alone: its earlier self is not a worker that failed)."""
    if sum(w.stopped_at is None for w in found.workers) < 2:
        return []
    now, lease, leader = found.at, found.lease, found.leader
    alive = sum(found.state(w) == "alive" for w in found.workers)
    if lease is not None and leader is not None:
        left = units.duration(lease.expires_at - now)
        head = f"leader: {leader} (term {lease.term}, lease renewed, {left} left)"
    else:
        head = "leader: none right now (the next worker to renew takes the lease)"
    out = [f"cluster: {alive} of {len(found.workers)} workers alive (heard from in a day)", head]
    for worker in found.workers[:SHOWN]:
        mark = " ★ leader" if worker.id == leader else ""
        beat = render.age(worker.heartbeat_at, now)
        out.append(f"  {worker.id}{mark}: {found.state(worker)}, heartbeat {beat}")
    if len(found.workers) > SHOWN:
        out.append(f"  … and {len(found.workers) - SHOWN} more")
    return out
