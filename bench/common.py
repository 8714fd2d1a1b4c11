"""Small helpers shared by the benchmarks."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def parse(parser: argparse.ArgumentParser, argv: list[str], **smoke: Any) -> argparse.Namespace:
    """`parser`'s arguments, with `--smoke` added: a run at the small size `smoke` gives
    (flags given with it still win), which exercises the bench's whole path in seconds.
    CI runs every bench so (`python3 dev.py bench --smoke`), so none rots unnoticed; its
    figures mean nothing."""
    parser.add_argument(
        "--smoke", action="store_true", help="a small run that only shows the bench works (CI)"
    )
    if "--smoke" in argv:
        parser.set_defaults(**smoke)
    return parser.parse_args(argv)


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


#: Rounds of the machine's reference figures (see `machine`).
REFERENCE_ROUNDS = 9


def _cpu_ms() -> float:
    started = time.perf_counter()
    total = 0
    for n in range(1_000_000):
        total += n
    return (time.perf_counter() - started) * 1000


def _fsync_ms(directory: str) -> float:
    with tempfile.NamedTemporaryFile(dir=directory) as probe:
        probe.write(os.urandom(4096))
        probe.flush()
        started = time.perf_counter()
        os.fsync(probe.fileno())
        return (time.perf_counter() - started) * 1000


def machine() -> dict[str, float]:
    """The machine's weather as a bench ends: the 1-minute load average, a fixed
    pure-Python loop's time (`cpu_ref_ms`) and a 4 KiB write's fsync beside the benches'
    files (`fsync_ms`, median and max). On a shared VM these move by half from one
    minute to the next; figures from runs whose weather differs are not comparable."""
    cpu = [_cpu_ms() for _ in range(REFERENCE_ROUNDS)]
    fsync = [_fsync_ms(tempfile.gettempdir()) for _ in range(REFERENCE_ROUNDS)]
    return {
        "load_average": round(os.getloadavg()[0], 2),
        "cpu_ref_ms": round(median(cpu), 1),
        "fsync_ms": round(median(fsync), 2),
        "fsync_max_ms": round(max(fsync), 2),
    }


def report(figures: dict[str, Any]) -> None:
    """Print the figures, one a line, then all of them and the machine's weather as the
    last line: one JSON object."""
    figures = {**figures, "machine": machine()}
    for key, value in figures.items():
        print(f"  {key:<24} {value}")
    print(json.dumps(figures))
