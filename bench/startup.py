"""Start-up time: `gatehouse status` cold, and `gatehouse run` to its first getUpdates.

    python -m bench startup [--runs 10]

Each figure is a new process, as an operator or a supervisor starts one, with the
example pipelines and a store that already exists; `status_plain_s` repeats status
with one pipeline that has no cron line and no output schema, whose checks load
croniter and jsonschema. `status` is timed from spawn to
exit; `run` from spawn to the moment the local Bot API server receives the bot's first
getUpdates (then the bot is stopped with SIGTERM). One untimed run of each goes first
and may write bytecode caches, so the timed runs measure imports, not compilation.
`bare_python_s` (a process that imports nothing) shows what the machine costs alone, and
the two floors what the libraries the design names cost before any code of gatehouse
runs: `floor_status_s` imports asyncio and pydantic-settings (the store's loop and the
settings), `floor_run_s` those and python-telegram-bot and httpx. On a VM whose speed
moves from minute to minute, a figure over its floor compares better than a figure alone.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import common
from bot.demo.botapi import localapi

ROOT = Path(__file__).resolve().parent.parent
GATEHOUSE = str(Path(sys.executable).parent / "gatehouse")
TOKEN = "424242:bench-token-not-secret_abcdefghijklmnop"  # noqa: S105 (a fake)
EXAMPLES = ROOT / "pipelines" / "examples"
#: One pipeline without a cron line or an output schema (see `status_plain_s`).
PLAIN = """name: plain
schedule: 15m
sources:
  - type: rss
    url: http://127.0.0.1:9/feed.xml
dispatch:
  type: file
  path: out/plain
"""
#: Longest wait for a started bot to poll, in seconds (a stuck start fails the bench).
POLL_WAIT_S = 60.0


class FirstPoll(localapi.LocalBotApi):
    """The local Bot API server, noting when the first getUpdates arrives (not answers)."""

    def __init__(self) -> None:
        super().__init__(token=TOKEN)
        self.polled = threading.Event()
        self.polled_at = 0.0

    def handle_bot_api(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        if method == "getUpdates" and not self.polled.is_set():
            self.polled_at = time.perf_counter()
            self.polled.set()
        return super().handle_bot_api(token, method, params)


def environment(
    data_dir: Path, base_url: str, *, bytecode: bool, pipelines: Path = EXAMPLES
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        GATEHOUSE_DATA_DIR=str(data_dir),
        GATEHOUSE_PIPELINES_DIR=str(pipelines),
        GATEHOUSE_TELEGRAM__TOKEN=TOKEN,
        GATEHOUSE_TELEGRAM__BASE_URL=base_url,
        GATEHOUSE_TELEGRAM__OPERATORS="77",
    )
    return env


def time_status(data_dir: Path, *, bytecode: bool = False, pipelines: Path = EXAMPLES) -> float:
    env = environment(data_dir, "http://127.0.0.1:9/bot", bytecode=bytecode, pipelines=pipelines)
    started = time.perf_counter()
    done = subprocess.run(
        [GATEHOUSE, "status"], env=env, cwd=ROOT, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"gatehouse status failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed


def time_run(data_dir: Path, *, bytecode: bool = False) -> float:
    api = FirstPoll()
    with api:
        env = environment(data_dir, api.base_url, bytecode=bytecode)
        started = time.perf_counter()
        bot = subprocess.Popen(
            [GATEHOUSE, "run"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            if not api.polled.wait(POLL_WAIT_S):
                raise SystemExit(f"gatehouse run did not poll within {POLL_WAIT_S:g} s")
            return api.polled_at - started
        finally:
            bot.send_signal(signal.SIGTERM)
            _, errors = bot.communicate(timeout=30)
            if bot.returncode not in (0, -signal.SIGTERM):
                raise SystemExit(f"gatehouse run exited with {bot.returncode}: {errors[-2000:]}")


#: What each floor imports (see the module docstring).
FLOORS = {
    "status": "import asyncio, pydantic_settings",
    "run": "import asyncio, pydantic_settings, telegram.ext, httpx",
}


def time_python(code: str = "pass") -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench startup")
    parser.add_argument("--runs", type=int, default=10)
    args = common.parse(parser, argv, runs=2)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        time_run(data_dir, bytecode=True)  # creates the store; untimed
        time_status(data_dir, bytecode=True)
        status = [time_status(data_dir) for _ in range(args.runs)]
        plain_dir = Path(tmp) / "plain"
        plain_dir.mkdir()
        (plain_dir / "plain.yaml").write_text(PLAIN)
        plain = [time_status(data_dir, pipelines=plain_dir) for _ in range(args.runs)]
        run = [time_run(data_dir) for _ in range(args.runs)]
    bare = [time_python() for _ in range(args.runs)]
    floors = {name: [time_python(code) for _ in range(args.runs)] for name, code in FLOORS.items()}
    common.report(
        {
            "bench": "startup",
            "runs": args.runs,
            "status_s": round(common.median(status), 3),
            "status_max_s": round(max(status), 3),
            "status_plain_s": round(common.median(plain), 3),
            "run_to_get_updates_s": round(common.median(run), 3),
            "run_to_get_updates_max_s": round(max(run), 3),
            "bare_python_s": round(common.median(bare), 3),
            "floor_status_s": round(common.median(floors["status"]), 3),
            "floor_run_s": round(common.median(floors["run"]), 3),
            "load_average": round(os.getloadavg()[0], 2),
        }
    )
