"""What `bench scale` reads beside its clock: what PostgreSQL's busy connections wait
on (pg_stat_activity), and the CPU time of the workers and of the bench database's
backends on a local server (/proc)."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import Counter
from collections.abc import Iterable
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


#: The database's other connections: the workers' backends, whose CPU is the server's.
_BACKENDS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
    " AND pid <> pg_backend_pid()"
)


@dataclass
class Sampled:
    #: The share of samples in which some connection waited on a lock.
    lock_waited: float = 0.0
    #: The share in which one waited on a lock in a statement on the budget rows.
    budget_lock_waited: float = 0.0
    #: Every wait seen, "type/event" -> connections summed over samples.
    waits: dict[str, int] = field(default_factory=dict)
    #: CPU seconds the database's backends used while sampled (0 for a remote server).
    server_cpu_s: float = 0.0


def sample_waits(store_cfg: db.StoreConfig, done: threading.Event) -> Sampled:
    """Every 20 ms until `done`: what busy connections wait on, and the CPU time of this
    database's backends (first and last look at each), so that other databases' work on
    a shared server is not counted."""
    if store_cfg.database_url is None:
        return Sampled()
    waits: Counter[str] = Counter()
    samples = locked = budget_locked = 0
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    with psycopg.connect(store_cfg.database_url, autocommit=True) as conn:
        while not done.is_set():
            rows = conn.execute(_WAITING).fetchall()
            samples += 1
            locked += any(kind == "Lock" for kind, _, _, _ in rows)
            budget_locked += any(kind == "Lock" and on_budget for kind, _, _, on_budget in rows)
            for kind, event, n, _ in rows:
                waits[f"{kind}/{event}"] += n
            for (pid,) in conn.execute(_BACKENDS).fetchall():
                used = _cpu_s(pid)
                if used is not None:
                    first.setdefault(pid, used)
                    last[pid] = used
            time.sleep(0.02)
    if not samples:
        return Sampled()
    server = sum(last[p] - first[p] for p in last)
    return Sampled(locked / samples, budget_locked / samples, dict(waits.most_common()), server)


def _cpu_s(pid: int) -> float | None:
    """A local process's CPU seconds (user and system), or None (gone, or not local)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    """CPU seconds (user and system) of the worker processes that have ended."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


#: The key under which a worker reports its round trips beside its statements.
TRIPS = "(round trips)"


def since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Statements sent between two `store.backends.pg_conn.statements_by_label()` readings."""
    sent = {label: n - before.get(label, 0) for label, n in after.items()}
    return {label: n for label, n in sent.items() if n}


def summed(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for one in counts:
        total.update(one)
    return dict(total)


def by_statement(per_item: dict[str, float]) -> str:
    """Statements per item, the most sent first, one line each."""
    ranked = sorted(per_item.items(), key=lambda pair: (-pair[1], pair[0]))
    return "\n".join(f"      {n:6.2f}  {label}" for label, n in ranked if n >= 0.005)
