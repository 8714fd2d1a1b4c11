"""One pipeline tick over a feed of N new items with the template drafter.

Prints items_per_s (fetch, dedup, record, draft, card, for every item) and the
share of the tick during which at least one store call was in flight.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import common
from pipelines import config, engine
from store import db, items
from store.machine import State
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss

NOW = datetime(2026, 11, 30, tzinfo=UTC)


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


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench tick")
    parser.add_argument("--items", type=int, default=1000)
    args = parser.parse_args(argv)
    entries = [
        (f"guid-{n}", f"Story {n}", f"Body of story number {n}. " * 20) for n in range(args.items)
    ]
    with tempfile.TemporaryDirectory() as tmp, FeedServer() as feeds:
        feeds.set("/feed.xml", rss(entries))
        pipelines_dir = Path(tmp) / "pipelines"
        pipelines_dir.mkdir()
        (pipelines_dir / "bench.yaml").write_text(
            "name: bench\nschedule: 5m\nsources:\n  - type: rss\n"
            f"    url: {feeds.url('/feed.xml')}\ndispatch:\n  type: none\n"
        )
        pipeline = config.load_dir(pipelines_dir).pipelines["bench"]
        store = await db.Store.open(db.StoreConfig(data_dir=Path(tmp) / "data"))
        clock = StoreClock()
        store.write = clock.wrap(store.write)  # type: ignore[method-assign,assignment]
        store.read = clock.wrap(store.read)  # type: ignore[method-assign,assignment]
        try:
            async with httpx.AsyncClient() as client:
                eng = engine.Engine(store, {"bench": pipeline}, client=client)
                started = time.perf_counter()
                report = await eng.tick("bench", "manual", NOW)
                elapsed = time.perf_counter() - started
            waiting = len(
                await items.in_state(store, State.AWAITING_APPROVAL, "bench", limit=10 * args.items)
            )
        finally:
            await store.close()
    assert report.counts.drafted == args.items == waiting, report
    common.report(
        {
            "bench": "tick",
            "items": args.items,
            "drafter": "template",
            "seconds": round(elapsed, 3),
            "items_per_s": round(args.items / elapsed),
            "store_share": round(clock.busy / elapsed, 3),
        }
    )
