"""Idle memory: the bot as it runs today, and with metrics and the HTTP trigger on.

    python -m bench memory [--runs 3] [--idle 5]

Each run is a new `gatehouse run` process against the local Bot API server, with the
example pipelines. After its first getUpdates it idles `--idle` seconds; with the
listeners on, it meanwhile answers three scrapes of /metrics, one run request and one
item handed over by HTTP (so their code has run), and then its resident set (VmRSS)
is read. Last, that process is asked for `/status chart` and its resident set is read
again once the photo has arrived: matplotlib loads only then. `observed_ratio` is the
idle figure with the listeners on over the one without (the goal: at most 1.10).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench import common, startup

OPERATOR = 77


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def exercise(metrics: str, api: str, token: str) -> None:
    """What a Prometheus server and a caller of the trigger would do while the bot idles."""
    for _ in range(3):
        httpx.get(f"http://{metrics}/metrics", timeout=10).raise_for_status()
    headers = {"Authorization": f"Bearer {token}"}
    httpx.post(f"http://{api}/v1/pipelines/news/runs", headers=headers, timeout=10)
    item = {"id": "bench-1", "title": "A handed-over item", "text": "Body."}
    httpx.post(f"http://{api}/v1/pipelines/news/items", json=item, headers=headers, timeout=10)


def measure(data_dir: Path, idle_s: float, observed: bool) -> tuple[float, float | None]:
    """(idle RSS in MiB, RSS after a chart in MiB, only when observed)."""
    api = startup.FirstPoll()
    with api:
        env = startup.environment(data_dir, api.base_url, bytecode=True)
        env["GATEHOUSE_TELEGRAM__OPERATORS"] = str(OPERATOR)
        metrics, trigger = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        token = ""
        if observed:
            env.update(GATEHOUSE_METRICS__LISTEN=metrics, GATEHOUSE_API__LISTEN=trigger)
            created = subprocess.run(
                [startup.GATEHOUSE, "token", "create", f"bench-{time.monotonic_ns()}", "--json"],
                env=env, cwd=startup.ROOT, capture_output=True, text=True, check=True,
            )  # fmt: skip
            token = json.loads(created.stdout)["token"]
        bot = subprocess.Popen(
            [startup.GATEHOUSE, "run"], env=env, cwd=startup.ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            if not api.polled.wait(startup.POLL_WAIT_S):
                raise SystemExit("gatehouse run did not poll in time")
            time.sleep(1.0)  # the listeners bind on the loop's first turns
            if observed:
                exercise(metrics, trigger, token)
            time.sleep(idle_s)
            idle = rss_mb(bot.pid)
            if not observed:
                return idle, None
            before = len(api.sent(OPERATOR))
            api.inject_command(OPERATOR, OPERATOR, "/status chart")
            api.wait_for(lambda: [m for m in api.sent(OPERATOR)[before:] if m.photo], timeout=120)
            return idle, rss_mb(bot.pid)
        finally:
            bot.send_signal(signal.SIGTERM)
            bot.wait(timeout=30)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench memory")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle before reading")
    args = common.parse(parser, argv, runs=1, idle=0.5)
    plain: list[float] = []
    observed: list[float] = []
    charted: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        measure(data_dir, 0.0, False)  # creates the store and bytecode caches; not counted
        for _ in range(args.runs):
            plain.append(measure(data_dir, args.idle, False)[0])
            idle, after = measure(data_dir, args.idle, True)
            observed.append(idle)
            charted.append(after or 0.0)
    today, with_listeners = common.median(plain), common.median(observed)
    common.report(
        {
            "bench": "memory",
            "runs": args.runs,
            "idle_rss_mb": round(today, 1),
            "idle_rss_observed_mb": round(with_listeners, 1),
            "observed_ratio": round(with_listeners / today, 3),
            "after_first_chart_mb": round(common.median(charted), 1),
            "load_average": round(os.getloadavg()[0], 2),
        }
    )
