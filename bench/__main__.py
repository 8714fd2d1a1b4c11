"""Benchmarks that print their figures; the last line of each is one JSON object.

python -m bench dedup [--rows N] [--batches B]
python -m bench startup [--runs 10]
python -m bench memory [--runs 3]        idle memory, with and without metrics and the trigger
python -m bench tick [--items 1000] [--history 500]
python -m bench filters [--rules 100] [--entries 10000]   the filter's cost, RE2 on (a+)+$
python -m bench voice [--rules 200] [--rounds 500]   a draft's tells: p50/p99 at 1k-8k chars
python -m bench queries [--items N]      operator queries on a store of N items (1M)
python -m bench lifecycle [--items N]    N items fetched, drafted, approved, dispatched
python -m bench scale [--items N]        the same with 1, 2, 4 workers on PostgreSQL
python -m bench mutants [--only GROUP ...]   # mutation testing; minutes, not part of CI
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys

BENCHES = {
    "dedup": "bench.dedup",
    "filters": "bench.filters",
    "ledger": "bench.ledger",
    "lifecycle": "bench.lifecycle",
    "queries": "bench.queries",
    "scale": "bench.scale",
    "bot": "bench.bot",
    "startup": "bench.startup",
    "memory": "bench.memory",
    "crash": "bench.crash",
    "tick": "bench.tick",
    "transitions": "bench.transitions",
    "hostile": "bench.hostile",
    "voice": "bench.voice",
    "mutants": "bench.mutants",
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("name", choices=sorted(BENCHES))
    known, rest = parser.parse_known_args(argv)
    module = importlib.import_module(BENCHES[known.name])
    asyncio.run(module.main(rest))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
