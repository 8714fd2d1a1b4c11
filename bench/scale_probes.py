"""What `bench scale` reads beside its clock: what PostgreSQL's busy connections wait
on (pg_stat_activity), and the CPU time of the workers and of a local server (/proc)."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import psycopg

from store import db

#: What the database's busy connections (not idle between transactions) wait on now.
_WAITING = (
    "SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, '-'), count(*)"
    " FROM pg_stat_activity WHERE datname = current_database() AND state <> 'idle'"
    " AND pid <> pg_backend_pid() GROUP BY 1, 2"
)


def sample_waits(store_cfg: db.StoreConfig, done: threading.Event) -> tuple[float, dict[str, int]]:
    """Every 20 ms until `done`: what busy connections wait on; the share of samples
    with a lock wait, and the count of each wait over all samples."""
    if store_cfg.database_url is None:
        return 0.0, {}
    waits: Counter[str] = Counter()
    samples = locked = 0
    with psycopg.connect(store_cfg.database_url, autocommit=True) as conn:
        while not done.is_set():
            rows = conn.execute(_WAITING).fetchall()
            samples += 1
            locked += any(kind == "Lock" for kind, _, _ in rows)
            for kind, event, n in rows:
                waits[f"{kind}/{event}"] += n
            time.sleep(0.02)
    return (locked / samples if samples else 0.0), dict(waits.most_common())


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


def since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Statements sent between two `store.pg.statements_by_label()` readings."""
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
