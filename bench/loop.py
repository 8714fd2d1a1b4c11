"""How late the event loop answers while a bench runs the engine, and what held it.

    async with loop.LoopTicker() as ticker:
        await engine.tick(...)                 # the work measured, on this loop
    ticker.max_stall                           # seconds: the latest wake-up
    loop.figures([ticker, ...], "full_text_")  # the report's keys, over several ticks

A task asks to sleep TICKER_S, again and again; how late each wake-up comes (past the
TICKER_S asked) is one sample of the loop's lag: how long a callback, or the callbacks
of one loop iteration, kept the loop from answering anything else (a tap, a timer).

Each sample also carries the CPU time used since the previous wake-up by the loop's own
thread (`time.thread_time`: its callbacks, and any garbage collection run there) and by
the whole process (`time.process_time`: every thread), which tells what a stall was:
- loop CPU near the stall's length: the loop's own work held it;
- process CPU well above the loop's: other threads of the process ran (extraction, the
  store's lanes, a collection triggered there) and may have held the GIL;
- both well below the stall's length: the process was waiting for a CPU that the
  machine's other processes held (on a shared 2-core machine, often).
Garbage collections (any thread: each holds the GIL throughout) are timed too.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass
from typing import Any

from bench import common

#: How long the ticker asks to sleep each time (seconds).
TICKER_S = 0.001
#: The stall the loop must stay under (issue 44), in seconds.
STALL_LIMIT_S = 0.050


@dataclass(frozen=True)
class Wake:
    """One wake-up of the ticker: its lateness and the CPU used while it waited (s)."""

    late: float
    loop_cpu: float
    process_cpu: float
    #: CPU time of garbage collections in that time (whichever thread ran them).
    gc_cpu: float


class LoopTicker:
    """Samples the loop's lag (see the module docstring) and times garbage collections."""

    def __init__(self) -> None:
        self.wakes: list[Wake] = []
        self.max_stall = 0.0
        #: The longest garbage collection: seconds, CPU seconds of its thread, generation.
        self.longest_gc = (0.0, 0.0, -1)
        self._gc_started = (0.0, 0.0)
        self._gc_cpu = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopTicker:
        gc.callbacks.append(self._collected)
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        gc.callbacks.remove(self._collected)

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            loop_cpu, process_cpu, gc_cpu = time.thread_time(), time.process_time(), self._gc_cpu
            await asyncio.sleep(TICKER_S)
            late = time.perf_counter() - started - TICKER_S
            loop_cpu = time.thread_time() - loop_cpu
            process_cpu = time.process_time() - process_cpu
            self.wakes.append(Wake(late, loop_cpu, process_cpu, self._gc_cpu - gc_cpu))
            self.max_stall = max(self.max_stall, late)

    def _collected(self, phase: str, info: dict[str, Any]) -> None:
        # A collection runs on one thread from start to stop, holding the GIL throughout.
        if phase == "start":
            self._gc_started = (time.perf_counter(), time.thread_time())
            return
        took = time.perf_counter() - self._gc_started[0]
        cpu = time.thread_time() - self._gc_started[1]
        self._gc_cpu += cpu
        if took > self.longest_gc[0]:
            self.longest_gc = (took, cpu, int(info["generation"]))


def figures(tickers: list[LoopTicker], prefix: str) -> dict[str, Any]:
    """The loop's figures over these ticks, as the report's keys (milliseconds)."""
    wakes = [wake for ticker in tickers for wake in ticker.wakes]
    none = Wake(0.0, 0.0, 0.0, 0.0)
    worst = max(wakes, key=lambda wake: wake.late, default=none)
    busiest = max(wakes, key=lambda wake: wake.loop_cpu, default=none)
    gc_s, gc_cpu, gc_generation = max(ticker.longest_gc for ticker in tickers)
    return {
        f"{prefix}loop_lag_p99_ms": _ms(common.percentile([w.late for w in wakes], 99)),
        f"{prefix}stalls_over_50_ms": sum(1 for w in wakes if w.late > STALL_LIMIT_S),
        f"{prefix}worst_stall_loop_cpu_ms": _ms(worst.loop_cpu),
        f"{prefix}worst_stall_process_cpu_ms": _ms(worst.process_cpu),
        f"{prefix}worst_stall_gc_cpu_ms": _ms(worst.gc_cpu),
        # The longest the loop's own thread worked without answering the ticker.
        f"{prefix}max_loop_cpu_between_wakes_ms": _ms(busiest.loop_cpu),
        f"{prefix}max_loop_cpu_between_wakes_gc_cpu_ms": _ms(busiest.gc_cpu),
        f"{prefix}longest_gc_ms": _ms(gc_s),
        f"{prefix}longest_gc_cpu_ms": _ms(gc_cpu),
        f"{prefix}longest_gc_generation": gc_generation,
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
