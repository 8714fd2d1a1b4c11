"""What `bench scale` reads beside its clock: what PostgreSQL's busy connections wait
on (pg_stat_activity), and the CPU time of the workers and of a local server (/proc)."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from store import db

#: What the database's busy connections (not idle between transactions) wait on now,
#: and how many of them run a statement on the budget rows (budgets, budget_slots).
_WAITING = (
    "SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, '-'), count(*),"
    " count(*) FILTER (WHERE query ILIKE '%budget%')"
    " FROM pg_stat_activity WHERE datname = current_database() AND state <> 'idle'"
    " AND pid <> pg_backend_pid() GROUP BY 1, 2"
)


@dataclass(frozen=True)
class Waits:
    """What the sampler saw: the share of samples in which some connection waited on a
    lock, the share in which one waited on a lock in a statement on the budget rows,
    and every wait seen ("type/event" -> connections summed over samples)."""

    locked: float = 0.0
    budget_locked: float = 0.0
    seen: dict[str, int] = field(default_factory=dict)


def sample_waits(store_cfg: db.StoreConfig, done: threading.Event) -> Waits:
    """Every 20 ms until `done`: what busy connections wait on."""
    if store_cfg.database_url is None:
        return Waits()
    waits: Counter[str] = Counter()
    samples = locked = budget_locked = 0
    with psycopg.connect(store_cfg.database_url, autocommit=True) as conn:
        while not done.is_set():
            rows = conn.execute(_WAITING).fetchall()
            samples += 1
            locked += any(kind == "Lock" for kind, _, _, _ in rows)
            budget_locked += any(kind == "Lock" and on_budget for kind, _, _, on_budget in rows)
            for kind, event, n, _ in rows:
                waits[f"{kind}/{event}"] += n
            time.sleep(0.02)
    if not samples:
        return Waits()
    return Waits(locked / samples, budget_locked / samples, dict(waits.most_common()))


def server_cpu_s() -> float:
    """CPU seconds of the postgres processes on this machine (Linux /proc; 0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        if name.startswith("postgres"):
            fields = rest.split()
            # utime, stime, and those of its reaped children (backends that ended)
            total += sum(int(field) for field in fields[11:15])
    return total / tick


def children_cpu_s() -> float:
    """CPU seconds (user and system) of the worker processes that have ended."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime
