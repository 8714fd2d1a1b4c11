"""The filter's cost: loading a pipeline file of 4,500 words rules, 100 rules against
10,000 entries, a catastrophic pattern on long text, and a tick with 20 rules against the
same tick without a filter.

    python -m bench filters [--load-rules 4500] [--rules 100] [--entries 10000]
                            [--tick-items 1000] [--rounds 3]

The load runs first, so the process's peak memory growth is the load's (`load_rss_mb`):
the file is read, its YAML parsed, its rules validated and indexed, as `gatehouse check`
and the bot's start do.

Rules are half words rules (three words each) and half RE2 regexes, none matching the
entries (the worst case: every rule is tried on every field of every entry). `(a+)+$`
runs on 25, 50 and 100 KB of `a`s followed by `!`: Python's `re` would backtrack for
ages; RE2 answers it from the text's end, and `(a+)+b`, which it must scan, takes time
in proportion to the text (the time per KB stays flat). The tick part runs bench/tick.py's
tick with 20 such rules and without, rounds alternating, and reports their items/s and
their ratio.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common, tick
from pipelines.config import filters, spec
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss

CATASTROPHIC = "(a+)+$"
#: A pattern RE2 cannot answer from the text's end (as it can `$`): it scans every byte.
SCANNING = "(a+)+b"
SIZES_KB = (25, 50, 100)


def rule_list(count: int) -> list[dict[str, Any]]:
    """Half words rules, half regexes; words have digits, so no drawn entry matches."""
    rng = random.Random(3)
    rules: list[dict[str, Any]] = []
    for n in range(count):
        if n % 2 == 0:
            rules.append({"words": [f"w{n}x{rng.randrange(10**6)}" for _ in range(3)]})
        else:
            rules.append({"regex": rf"(?i)\bz{n}q[a-z]+\d{{3}}\b", "field": ["title", "text"]})
    return rules


def entries(count: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    words = tick.vocabulary(random.Random(0))
    found = []
    for n in range(count):
        title, text = tick.story(rng, words, n)
        found.append({"title": title, "text": text, "link": f"https://example.org/{n}"})
    return found


def time_rules(rules: int, count: int) -> dict[str, float]:
    block = filters.FilterConfig.model_validate({"exclude": rule_list(rules)})
    batch = entries(count)
    started = time.perf_counter()
    dropped = sum(block.verdict(entry).dropped for entry in batch)
    elapsed = time.perf_counter() - started
    assert dropped == 0, dropped
    return {"seconds": elapsed, "us_per_entry": elapsed / count * 1e6}


def time_load(rules: int) -> dict[str, float]:
    """Seconds and peak memory growth to load one pipeline file of `rules` words rules."""
    lines = ["name: many", "schedule: 15m", "sources:", "  - type: rss"]
    lines += ["    url: http://127.0.0.1:1/feed.xml", "filter:", "  exclude:"]
    lines += [f"    - words: [w{n}x]" for n in range(rules)]
    lines += ["dispatch:", "  type: none"]
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "many.yaml"
        file.write_text("\n".join(lines) + "\n")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.perf_counter()
        loaded = spec.load_dir(Path(tmp))
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert not loaded.errors, loaded.errors
        return {
            "load_file_kb": round(file.stat().st_size / 1024, 1),
            "load_seconds": round(elapsed, 3),
            "load_rss_mb": round((after - before) / 1024, 1),  # ru_maxrss is in KiB
        }


def time_catastrophic(pattern: str, tag: str) -> dict[str, float]:
    block = filters.FilterConfig.model_validate({"exclude": [{"regex": pattern}]})
    figures = {}
    for kb in SIZES_KB:
        entry = {"title": "a" * (kb * 1024) + "!", "text": ""}
        best = min(_timed(block, entry) for _ in range(5))
        figures[f"{tag}_ms_at_{kb}kb"] = round(best * 1000, 3)
        figures[f"{tag}_us_per_kb_at_{kb}kb"] = round(best / kb * 1e6, 2)
    return figures


def _timed(block: filters.FilterConfig, entry: dict[str, Any]) -> float:
    started = time.perf_counter()
    assert not block.verdict(entry).dropped
    return time.perf_counter() - started


def filter_yaml(count: int) -> str:
    lines = ["filter:", "  exclude:"]
    for rule in rule_list(count):
        if "words" in rule:
            lines.append(f"    - words: [{', '.join(rule['words'])}]")
        else:
            lines.append(f"    - regex: '{rule['regex']}'")
    return "\n".join(lines) + "\n"


async def tick_ratio(items: int, rounds: int, rules: int) -> dict[str, float]:
    plain: list[float] = []
    filtered: list[float] = []
    with FeedServer() as feeds:
        feeds.set("/feed.xml", rss(tick.feed_entries(items, [])))
        # Round 0 warms up (imports, page cache) and is not counted.
        for round_no in range(rounds + 1):
            with tempfile.TemporaryDirectory() as tmp:
                bare = await tick.one_tick(Path(tmp), feeds, "/feed.xml", [], items)
            with tempfile.TemporaryDirectory() as tmp:
                ruled = await tick.one_tick(
                    Path(tmp), feeds, "/feed.xml", [], items, extra=filter_yaml(rules)
                )
            if round_no:
                plain.append(bare.elapsed)
                filtered.append(ruled.elapsed)
    rate = items / common.median(plain)
    with_rules = items / common.median(filtered)
    return {
        "tick_items_per_s": round(rate),
        f"tick_items_per_s_{rules}_rules": round(with_rules),
        "tick_ratio": round(with_rules / rate, 3),
    }


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench filters")
    parser.add_argument("--load-rules", type=int, default=4500)
    parser.add_argument("--rules", type=int, default=100)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--tick-items", type=int, default=1000)
    parser.add_argument("--tick-rules", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = common.parse(
        parser, argv, load_rules=300, rules=10, entries=200, tick_items=50, tick_rules=5, rounds=1
    )
    loaded = time_load(args.load_rules)
    gc.freeze()
    matched = time_rules(args.rules, args.entries)
    catastrophic = time_catastrophic(CATASTROPHIC, "anchored") | time_catastrophic(
        SCANNING, "scanning"
    )
    ticked = await tick_ratio(args.tick_items, args.rounds, args.tick_rules)
    common.report(
        {
            "bench": "filters",
            "load_rules": args.load_rules,
            **loaded,
            "rules": args.rules,
            "entries": args.entries,
            "seconds": round(matched["seconds"], 3),
            "us_per_entry": round(matched["us_per_entry"], 1),
            "anchored": CATASTROPHIC,
            "scanning": SCANNING,
            **catastrophic,
            "tick_items": args.tick_items,
            "tick_rules": args.tick_rules,
            **ticked,
        }
    )
