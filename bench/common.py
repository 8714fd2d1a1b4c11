"""Small helpers shared by the benchmarks."""

from __future__ import annotations

import json
import sqlite3
import statistics
from pathlib import Path
from typing import Any


def percentile(samples: list[float], p: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def median(samples: list[float]) -> float:
    return statistics.median(samples) if samples else 0.0


def raw_connect(path: Path, synchronous: str = "FULL") -> sqlite3.Connection:
    """A plain sqlite3 connection with the store's own pragmas: the fair baseline."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    return conn


def report(figures: dict[str, Any]) -> None:
    for key, value in figures.items():
        print(f"  {key:<24} {value}")
    print(json.dumps(figures))
