"""How fast hostile input is refused, and what it costs in memory.

python -m bench hostile

Loads a pipeline directory holding a YAML alias bomb (9 levels of 9 aliases), a
20,000-deep flow nesting and one good file; then fetches a 300 MB gzip bomb (about
300 KB on the wire) from a local feed server. Prints each time and the peak RSS growth
of the fetch (Linux: VmHWM after resetting it through /proc/self/clear_refs).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import zlib
from pathlib import Path

import httpx

from bench import common
from pipelines import sources
from pipelines.config import spec
from pipelines.sources import base, rss
from tests.fakes.feed_server import FeedServer

MiB = 1024 * 1024
GOOD = "name: good\nschedule: 5m\nsources:\n  - {type: rss, url: 'http://127.0.0.1:9/f'}\n"
GOOD += "dispatch: {type: none}\n"


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["lol"]']
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]")
    return "name: bomb\n" + "\n".join(lines) + "\n"


def _load_hostile_dir() -> tuple[float, list[str], list[str]]:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "bomb.yaml").write_text(_alias_bomb())
        (folder / "deep.yaml").write_text("name: deep\nx: " + "[" * 20_000 + "]" * 20_000)
        (folder / "good.yaml").write_text(GOOD)
        started = time.perf_counter()
        loaded = spec.load_dir(folder)
        elapsed = time.perf_counter() - started
        return elapsed, sorted(loaded.pipelines), [e.reason for e in loaded.errors]


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_peak() -> int:
    """Reset the peak-RSS mark; the RSS now, in KiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_kib("VmRSS")


def _gzip_of_zeros(size: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(MiB)
    return b"".join([*(packer.compress(block) for _ in range(size // MiB)), packer.flush()])


async def _fetch_bomb() -> tuple[float, float, str]:
    with FeedServer() as server:
        server.set("/bomb.xml", _gzip_of_zeros(300 * MiB), headers={"Content-Encoding": "gzip"})
        source = rss.Config(type="rss", url=server.url("/bomb.xml"))
        async with httpx.AsyncClient() as client:
            before = _reset_peak()
            started = time.perf_counter()
            try:
                await sources.fetch(source, {}, client)
                error = "none: the bomb was read"
            except base.SourceError as exc:
                error = str(exc)
            elapsed = time.perf_counter() - started
            growth = (_status_kib("VmHWM") - before) / 1024
    return elapsed, growth, error


async def main(argv: list[str]) -> None:
    # Small already: --smoke runs it as it is.
    common.parse(argparse.ArgumentParser(prog="python -m bench hostile"), argv)
    # The first load pays for pydantic's model building; time a warm one as well.
    cold, _, _ = _load_hostile_dir()
    warm, loaded, errors = _load_hostile_dir()
    fetch_s, growth_mib, error = await _fetch_bomb()
    print(f"pipelines loaded: {loaded}")
    for reason in errors:
        print(f"  refused: {reason}")
    print(f"gzip bomb: {error}")
    common.report(
        {
            "bench": "hostile",
            "yaml_dir_cold_s": round(cold, 4),
            "yaml_dir_warm_s": round(warm, 4),
            "yaml_loaded": len(loaded),
            "yaml_refused": len(errors),
            "gzip_bomb_s": round(fetch_s, 4),
            "gzip_bomb_peak_growth_mib": round(growth_mib, 1),
        }
    )
