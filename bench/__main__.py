"""Benchmarks that print their figures; the last line of each is one JSON object.

python -m bench dedup [--rows N] [--batches B]
python -m bench mutants [--only GROUP ...]   # mutation testing; minutes, not part of CI
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys

BENCHES = {
    "dedup": "bench.dedup",
    "ledger": "bench.ledger",
    "bot": "bench.bot",
    "tick": "bench.tick",
    "transitions": "bench.transitions",
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
