"""One pipeline tick over a feed of N new items with the template drafter.

    python -m bench tick [--items 1000] [--history 500] [--rounds 3]
    python -m bench tick --full-text [--items 1000] [--rounds 3] [--load N]

Three ticks per round: on an empty store, on one holding `--history` approved drafts in
the duplicate window, so the duplicate gate compares every new draft with them, and on
an empty store with the runtime's drafter chooser, whose plan finds each draft's voice
tells (pipelines/voice) and keeps them with it.
Texts are drawn from a vocabulary (seeded), so stories differ the way real ones do,
and a few new items repeat an approved story so the gate also finds matches.

Prints items_per_s (fetch, dedup, record, draft, card, for every item, empty store),
history_items_per_s and history_ratio (with the approved drafts), voice_items_per_s and
voice_ratio (with the tells, against the first), max_loop_stall_ms
(the longest the event loop went unanswered during the history tick) and store_share
(the share of the empty tick during which at least one store call was in flight).
Medians over the rounds. The loop's lag is sampled by a ticker task that sleeps 1 ms
at a time (bench/loop.py says how, and what the figures beside it tell): its p99, the
wake-ups over 50 ms late, the CPU the loop's thread and the whole process used during
the worst one, and the longest garbage collection.

With --full-text, the feed's entries link to article pages on the same local site and
the source has `full_text: true`: each item's page is fetched (two at a time, one host)
and extracted on the extraction thread. Prints full_text_items_per_s,
full_text_max_loop_stall_ms and the same loop figures for those ticks. `--load N` runs
N processes that only burn CPU beside it: the stalls that other processes' work causes
on a shared machine, made on purpose.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench import common, loop
from pipelines.config import spec
from pipelines.drafting import choice, drafters
from pipelines.runs import engine
from pipelines.sources import articles as sources_articles
from store import backend, db, drafts, items
from store.items.machine import State
from tests.fakes import site
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss

NOW = datetime(2026, 11, 30, tzinfo=UTC)
#: One new item in this many repeats an approved story (reworded at its end).
REPEAT_EVERY = 50
#: The runtime's drafter chooser, with no provider: each template pipeline's plan, its
#: voice step included (pipelines/drafting/choice.py).
VOICED = choice.Drafters(None, {})
LINTED = "SELECT count(*) FROM drafts WHERE tells IS NOT NULL"
FLAGGED = (
    "SELECT count(*) FROM outbox WHERE kind = 'card'"
    " AND json_extract(payload, '$.duplicate_of') IS NOT NULL"
)


@dataclass(frozen=True)
class Tick:
    """One measured tick: its wall time, the share of it with a store call in flight,
    and the loop's lag during it."""

    elapsed: float
    store_share: float
    ticker: loop.LoopTicker


class StoreClock:
    """Wall time during which at least one store call was in flight."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.since = 0.0
        self.busy = 0.0

    def wrap(self, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            if self.in_flight == 0:
                self.since = time.perf_counter()
            self.in_flight += 1
            try:
                return await call(*args, **kwargs)
            finally:
                self.in_flight -= 1
                if self.in_flight == 0:
                    self.busy += time.perf_counter() - self.since

        return timed


def vocabulary(rng: random.Random, size: int = 3000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(size)]


def story(rng: random.Random, words: list[str], n: int) -> tuple[str, str]:
    title = " ".join(rng.choices(words, k=8)).capitalize()
    body = " ".join(rng.choices(words, k=90)) + f". Story {n}."
    return title, body


def feed_entries(count: int, approved: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    rng = random.Random(1)
    words = vocabulary(random.Random(0))
    entries = []
    for n in range(count):
        if approved and n % REPEAT_EVERY == 0:
            title, body = approved[(n // REPEAT_EVERY) % len(approved)]
            body = body + " Updated with comment from officials."
        else:
            title, body = story(rng, words, n)
        entries.append((f"guid-{n}", title, body))
    return entries


def approved_stories(count: int) -> list[tuple[str, str]]:
    rng = random.Random(2)
    words = vocabulary(random.Random(0))
    return [story(rng, words, 100_000 + n) for n in range(count)]


def seed_history(
    pipeline: spec.Pipeline, stories: list[tuple[str, str]], at: datetime
) -> Callable[[backend.Conn], None]:
    """Approved drafts, as the engine and an operator leave them, inside the window."""

    def unit(conn: backend.Conn) -> None:
        for n, (title, body) in enumerate(stories):
            payload = {"title": title, "text": body, "link": f"https://example.org/old-{n}"}
            item = items.create_sync(conn, pipeline.name, "old", f"old-{n}", payload, at)
            assert item is not None
            items.transition_sync(conn, item.id, State.DRAFTING, "system", at)
            text = f"{title}\n\n{body}\n\nhttps://example.org/old-{n}"
            drafts.add_sync(conn, item.id, drafts.Body(text, {"drafter": "template"}), at)
            items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", at)
            items.transition_sync(conn, item.id, State.APPROVED, "operator:1", at)

    return unit


#: The bot's GIL switch interval (bot.app.GIL_SWITCH_S; not imported: it loads the bot).
GIL_SWITCH_S = 0.0005
#: The source's lines that make it fetch each item's article (the site is local).
FULL_TEXT = "    full_text: true\n    allow_private_addresses: true\n"


async def one_tick(
    tmp: Path,
    feeds: FeedServer,
    path: str,
    history: list[tuple[str, str]],
    count: int,
    *,
    extra: str = "",
    source_lines: str = "",
    voiced: bool = False,
) -> Tick:
    """`extra`: YAML appended to the pipeline file (bench/filters.py adds a filter);
    `source_lines`: lines added to its source (`--full-text`); `voiced`: drafted by the
    runtime's chooser (`VOICED`: its plan lints each draft), not the bare template drafter."""
    pipelines_dir = tmp / "pipelines"
    pipelines_dir.mkdir()
    (pipelines_dir / "bench.yaml").write_text(
        "name: bench\nschedule: 5m\nsources:\n  - type: rss\n"
        f"    url: {feeds.url(path)}\n{source_lines}dispatch:\n  type: none\n{extra}"
    )
    pipeline = spec.load_dir(pipelines_dir).pipelines["bench"]
    store = await db.open(db.StoreConfig(data_dir=tmp / "data"))
    try:
        if history:
            await store.write(seed_history(pipeline, history, NOW - timedelta(days=1)))
        clock = StoreClock()
        store.write = clock.wrap(store.write)  # type: ignore[method-assign,assignment]
        store.read = clock.wrap(store.read)  # type: ignore[method-assign,assignment]
        drafter_for: engine.DrafterFactory = drafters.TemplateDrafter
        if voiced:
            drafter_for = functools.partial(VOICED, store)
        async with httpx.AsyncClient() as client:
            eng = engine.Engine(store, {"bench": pipeline}, client=client, drafter_for=drafter_for)
            async with loop.LoopTicker() as ticker:
                started = time.perf_counter()
                report = await eng.tick("bench", "manual", NOW)
                elapsed = time.perf_counter() - started
        waiting = await items.in_state(store, State.AWAITING_APPROVAL, "bench", limit=10 * count)
        flagged = await store.read(lambda conn: conn.execute(FLAGGED).fetchone()[0])
        linted = await store.read(lambda conn: conn.execute(LINTED).fetchone()[0])
    finally:
        await store.close()
    assert report.counts.drafted == count == len(waiting), report
    # Every repeated story, and nothing else, is flagged as a possible duplicate.
    assert flagged == (len(range(0, count, REPEAT_EVERY)) if history else 0), flagged
    # A story is one 90-word sentence, a tell of the built-in rules: each voiced draft has it.
    assert linted == (count if voiced else 0), linted
    return Tick(elapsed, clock.busy / elapsed, ticker)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench tick")
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--history", type=int, default=engine.DUPLICATE_LOOKBACK)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--full-text", action="store_true", help="fetch each item's article")
    parser.add_argument(
        "--load", type=int, default=0, help="with --full-text: processes burning CPU beside it"
    )
    args = common.parse(parser, argv, items=100, history=50, rounds=1)
    if args.full_text:
        await full_text(args.items, args.rounds, args.load)
        return
    history = approved_stories(args.history)
    gc.freeze()  # as the runtime does once started (pipelines/service/runtime.py)
    empty: list[Tick] = []
    full: list[Tick] = []
    voiced: list[Tick] = []
    with FeedServer() as feeds:
        feeds.set("/empty.xml", rss(feed_entries(args.items, [])))
        feeds.set("/history.xml", rss(feed_entries(args.items, history)))
        # Rounds alternate the two stores so both meet the same machine weather; round 0
        # only warms up (first imports, page cache) and is not counted.
        for round_no in range(args.rounds + 1):
            with tempfile.TemporaryDirectory() as tmp:
                plain = await one_tick(Path(tmp), feeds, "/empty.xml", [], args.items)
            with tempfile.TemporaryDirectory() as tmp:
                gated = await one_tick(Path(tmp), feeds, "/history.xml", history, args.items)
            with tempfile.TemporaryDirectory() as tmp:
                linted = await one_tick(Path(tmp), feeds, "/empty.xml", [], args.items, voiced=True)
            if round_no:
                empty.append(plain)
                full.append(gated)
                voiced.append(linted)
    rate = args.items / common.median([r.elapsed for r in empty])
    history_rate = args.items / common.median([r.elapsed for r in full])
    voice_rate = args.items / common.median([r.elapsed for r in voiced])
    common.report(
        {
            "bench": "tick",
            "items": args.items,
            "drafter": "template",
            "rounds": args.rounds,
            "seconds": round(common.median([r.elapsed for r in empty]), 3),
            "items_per_s": round(rate),
            "store_share": round(common.median([r.store_share for r in empty]), 3),
            "history_drafts": args.history,
            "history_seconds": round(common.median([r.elapsed for r in full]), 3),
            "history_items_per_s": round(history_rate),
            "history_ratio": round(history_rate / rate, 3),
            "voice_items_per_s": round(voice_rate),
            "voice_ratio": round(voice_rate / rate, 3),
            "max_loop_stall_ms": round(max(r.ticker.max_stall for r in full) * 1000, 1),
            "empty_max_loop_stall_ms": round(max(r.ticker.max_stall for r in empty) * 1000, 1),
            **loop.figures([r.ticker for r in full], ""),
        }
    )


def articles(count: int) -> list[site.Story]:
    """Stories whose pages hold a few paragraphs of vocabulary text each."""
    rng = random.Random(7)
    words = vocabulary(rng)
    stories = []
    for n in range(count):
        title, teaser = story(rng, words, 12)
        paragraphs = tuple(story(rng, words, 60)[1] for _ in range(4))
        stories.append(site.Story(f"a{n}", title, teaser, paragraphs))
    return stories


async def full_text(count: int, rounds: int, load: int) -> None:
    """Ticks of a full_text source against a local site: items/s and the loop's stalls."""
    # As the bot runs (bot.app): the extractor's thread hands the GIL back sooner.
    sys.setswitchinterval(GIL_SWITCH_S)
    ticks: list[Tick] = []
    with FeedServer() as feeds, spinning(load):
        site.serve(feeds, articles(count))
        # As the runtime starts with a full_text pipeline (pipelines/service/runtime.py).
        await sources_articles.warm()
        gc.freeze()
        for round_no in range(rounds + 1):  # round 0 warms up (imports, the extractor)
            with tempfile.TemporaryDirectory() as tmp:
                tick = await one_tick(
                    Path(tmp), feeds, "/feed.xml", [], count, source_lines=FULL_TEXT
                )
            if round_no:
                ticks.append(tick)
    seconds = common.median([r.elapsed for r in ticks])
    common.report(
        {
            "bench": "tick",
            "items": count,
            "drafter": "template",
            "full_text": True,
            "rounds": rounds,
            "spinning_processes": load,
            "seconds": round(seconds, 3),
            "full_text_items_per_s": round(count / seconds),
            "full_text_max_loop_stall_ms": round(max(r.ticker.max_stall for r in ticks) * 1000, 1),
            **loop.figures([r.ticker for r in ticks], "full_text_"),
        }
    )


#: A process that only burns CPU, and ends when the bench that started it is gone (a
#: SIGKILLed bench leaves no spinner behind).
SPINNER = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:
    for _ in range(100_000):
        pass
"""


@contextlib.contextmanager
def spinning(count: int) -> Iterator[None]:
    """`count` processes burning CPU beside the bench: the machine's other work, on
    purpose, to see how much of a stall is the contention's and not the engine's."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPINNER, str(os.getpid())]) for _ in range(count)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
