"""SIGKILL the real bot again and again; check after every kill what a crash left behind.

    python -m bench crash [--kills N] [--seed S] [--keep]

The bot runs as its own process (`python -m bot`, what `gatehouse run` starts) against
servers in this process, all on 127.0.0.1: the local Bot API server, a fake LLM, a feed
and a webhook receiver. Its pipeline drafts with the LLM drafter through the budget
ledger and dispatches to the webhook. Every round adds feed entries, then kills the bot:
at a random moment, or at a named point seen from outside, inside the fake server's
handler so the kill lands before the bot can react. The pipeline triages each entry first
(every third one scores below the threshold and ends skipped):

    triage     the fake LLM received a triage question (its claim is reserved and
               started); killed before it answers
    reserve    the fake LLM received a draft's request; killed before it answers
    answered   the fake LLM has written its reply
    card       the Bot API server accepted a card (sendMessage with buttons); killed
               before the bot reads the answer, so the card may be sent again
    dispatch   the webhook receiver got a POST; killed before it answers

A scripted operator taps Approve on every card as it appears, and again when a tap gets
no answer (taps made while the bot is down wait in the Bot API server's update queue).
After each kill, on the database as the crash left it: PRAGMA integrity_check, the event
hash chain (what `gatehouse audit verify` checks), every entry marked seen has an item,
no claim settled twice. Then the bot restarts. After the last kill the bot runs until
the work settles (or nothing moves for a while), stops, and the whole run is checked
(bench/crash_checks.py): the CLI's `gatehouse audit verify`, every feed entry has an
item, nothing left in drafting or dispatching (orphaned; an item the SLA sweep moved to
breach counts too, as every fake answers at once), provider calls and claims at most one
per item attempt, triage calls at most one per entry, every claim settled at most once
(double_paid), no webhook
idempotency key sent with two different bodies, and cards sent twice (cards_repeated,
reported, not a violation).
Violations are distinct findings; orphaned items and double payments count among them.

A kill during a provider call leaves its claim `started` until the lease ends (about a
minute here); only then does the bot's recovery sweep make it uncertain. By default the
bench waits that out and, as an operator would, settles each uncertain claim with
`gatehouse reconcile-claim`. With --no-wait-leases it does not wait: such items count
as orphaned, and `held` says how many of them were still inside their lease.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common, crash_checks, crash_parts
from bot.process import control
from pipelines.service import runtime
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM, RecordedRequest
from tests.fakes.webhook_server import Recorded, WebhookServer

MODEL = "fake-crash"
POINTS = ("random", "triage", "reserve", "answered", "card", "dispatch")
#: New feed entries per round, so every round has drafting, cards and dispatches to cut.
ENTRIES_PER_KILL = 3
#: A random kill lands this many seconds after the start, at most.
RANDOM_MAX_S = 3.0
#: A named point not reached within this many seconds: killed there anyway, counted missed.
POINT_WAIT_S = 10.0
#: After the last kill: give up waiting for the work to settle after this long ...
SETTLE_MAX_S = 60.0
#: ... or once nothing has moved for this long (the dispatcher polls every 2 s).
QUIET_S = 4.0
#: States an item may rest in once the operator has approved every card.
RESTING = frozenset({"dispatched", "failed", "rejected", "expired", "breach", "skipped"})
PIPELINE = """\
name: news
schedule: 1s
sources:
  - type: rss
    url: {feed}
    scope: crash
triage:
  question: "Is this story worth a card?"
  threshold: 0.5
draft:
  drafter: llm
  prompt: prompt.txt
  max_tokens: 100
approval:
  quorum: 1
dispatch:
  type: webhook
  url: {hook}
"""
PROMPT = "Write a short post.\n{title}\n{text}\n"
#: The entry numbers whose triage scores below the threshold.
SKIP_EVERY = 3


def triage_answer(text: str) -> str | None:
    """The fake's answer to a triage question (None: a draft, the default reply)."""
    if not text.startswith(crash_checks.TRIAGE_PROMPT_START):
        return None
    tag = crash_checks.ENTRY_TAG.search(text)
    low = tag is not None and int(tag.group(0)[-5:]) % SKIP_EVERY == 0
    score, reason = (0.1, "a minor story") if low else (0.9, "worth a look")
    return json.dumps({"score": score, "reason": reason})


def _point(phase: str, request: RecordedRequest) -> str:
    """The kill point a fake LLM's moment is: a request is a triage's or a draft's."""
    if phase != "request":
        return phase
    return "triage" if crash_checks.is_triage(request.body) else "reserve"


class Run:
    """One bench run: the servers, the bot, the kills, and what was found."""

    def __init__(self, tmp: Path, rng: random.Random, servers: dict[str, Any]) -> None:
        self.tmp, self.rng = tmp, rng
        self.api: crash_parts.ObservedBotApi = servers["api"]
        self.llm: FakeLLM = servers["llm"]
        self.hook: WebhookServer = servers["hook"]
        self.feed = crash_parts.Feed(servers["feed"])
        self.killer: crash_parts.Killer = servers["killer"]
        self.data = tmp / "data"
        self.bot = crash_parts.BotProcess(tmp, self._env())
        self.violations: dict[str, None] = {}  # ordered, each finding once
        self.fired: collections.Counter[str] = collections.Counter()
        self.missed: collections.Counter[str] = collections.Counter()
        self.paid: list[str] = []
        self.items = self.skipped = 0
        self.held: dict[int, int] = {}
        self.stuck: dict[int, str] = {}

    def _env(self) -> dict[str, str]:
        (self.tmp / "pipelines").mkdir()
        (self.tmp / "pipelines" / "prompt.txt").write_text(PROMPT)
        (self.tmp / "pipelines" / "news.yaml").write_text(
            PIPELINE.format(feed=self.feed.url, hook=self.hook.url)
        )
        price = {"input_micros_per_mtok": 1_000_000, "output_micros_per_mtok": 2_000_000}
        # Settings of the shell (a real token, webhook mode) must not reach this bot.
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
        return {
            **inherited,
            "PTB_TIMEDELTA": "1",
            "GATEHOUSE_DATA_DIR": str(self.data),
            "GATEHOUSE_PIPELINES_DIR": str(self.tmp / "pipelines"),
            "GATEHOUSE_LOG_LEVEL": "INFO",
            "GATEHOUSE_TELEGRAM__TOKEN": crash_parts.TOKEN,
            "GATEHOUSE_TELEGRAM__BASE_URL": self.api.base_url,
            "GATEHOUSE_TELEGRAM__OPERATORS": str(crash_parts.OPERATOR),
            "GATEHOUSE_TELEGRAM__RATE_LIMIT_PER_MINUTE": "0",
            # The local server has no flood limit; Telegram's pacing would only slow the run.
            "GATEHOUSE_TELEGRAM__FLOOD_LIMIT_PER_SECOND": "1000",
            "GATEHOUSE_TELEGRAM__CHAT_MESSAGES_PER_SECOND": "1000",
            "GATEHOUSE_LLM__KIND": "openai",
            "GATEHOUSE_LLM__BASE_URL": self.llm.base_url,
            "GATEHOUSE_LLM__API_KEY": "fake-key",
            "GATEHOUSE_LLM__MODEL": MODEL,
            # No client retries: every request the fake sees is one authorized call.
            "GATEHOUSE_LLM__MAX_RETRIES": "0",
            # Short timeouts keep a claim's lease (and so the wait for held ones) short.
            "GATEHOUSE_LLM__TIMEOUT_S": "5",
            "GATEHOUSE_LLM__CONNECT_TIMEOUT_S": "3",
            "GATEHOUSE_LLM__MAX_RETRY_WAIT_S": "0",
            "GATEHOUSE_PRICES": json.dumps({MODEL: price}),
        }

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`gatehouse <args>` against this run's data directory."""
        return subprocess.run(
            [sys.executable, "-m", "bot.cli", *args],
            cwd=crash_parts.ROOT,
            env=self.bot.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def found(self, findings: list[str]) -> None:
        for finding in findings:
            self.violations.setdefault(finding, None)

    async def kills(self, n: int) -> None:
        for argv in (["init"], ["set-budget", "global", "month", "1000"]):
            budget = self.cli(*argv)
            if budget.returncode != 0:
                break
        if budget.returncode != 0:
            raise SystemExit(f"could not set the budget: {budget.stderr}")
        plan = [POINTS[i % len(POINTS)] for i in range(n)]
        self.rng.shuffle(plan)
        for number, point in enumerate(plan, 1):
            started = time.monotonic()
            self.bot.start()
            self.feed.add(ENTRIES_PER_KILL)
            await self._kill_at(point)
            killed = time.monotonic()
            self.found(await crash_checks.at_rest(self.data))
            print(
                f"kill {number}/{n} at {point}: {killed - started:.1f} s after the start,"
                f" checked in {time.monotonic() - killed:.1f} s",
                flush=True,
            )

    async def _kill_at(self, point: str) -> None:
        if point == "random":
            await asyncio.sleep(self.rng.uniform(0.1, RANDOM_MAX_S))
            fired = True
        else:
            self.killer.arm(point, self.bot.pid)
            fired = await asyncio.to_thread(self.killer.fired.wait, POINT_WAIT_S)
            self.killer.disarm()
        code = self.bot.exited_alone()
        if code is not None:
            self.found([f"the bot exited by itself with code {code}:\n{self.bot.tail()}"])
        self.bot.kill()
        (self.fired if fired else self.missed)[point] += 1

    async def settle(self, wait_leases: bool) -> None:
        """Run the bot until its work rests; with wait_leases, also until held claims end."""
        greeted = len(self.api.calls("getMe"))
        self.bot.start()
        # Quiet means nothing moves while the bot runs: a slow start is not quiet.
        try:
            await self.api.await_for(lambda: len(self.api.calls("getMe")) > greeted, SETTLE_MAX_S)
        except TimeoutError:
            self.found([f"the bot did not reach Telegram within {SETTLE_MAX_S:g} s of a start"])
        await self._until_quiet()
        if wait_leases:
            await self._wait_out_leases()
        code = self.bot.stop()
        if code != 0:
            self.found([f"the bot stopped with exit code {code} on SIGTERM:\n{self.bot.tail()}"])

    async def _until_quiet(self) -> None:
        started = last_move = time.monotonic()
        last: Any = None
        while time.monotonic() - started < SETTLE_MAX_S:
            await asyncio.sleep(0.5)
            snap = await crash_checks.snapshot(self.data)
            states = collections.Counter(item.state for item in snap.items)
            if len(snap.items) >= len(self.feed.entries) and set(states) <= RESTING:
                return
            seen = (sorted(states.items()), len(self.api.sent()), self.llm.calls)
            if seen != last:
                last, last_move = seen, time.monotonic()
            elif time.monotonic() - last_move > QUIET_S:
                return

    async def _wait_out_leases(self) -> None:
        """Wait for held claims' leases and the bot's recovery sweep, then do what an
        operator does with an uncertain claim: settle it with the provider's figure."""
        snap = await crash_checks.snapshot(self.data)
        leases = crash_checks.held(snap, _now_ms())
        if leases:  # rare: a restart makes a crashed call's claim uncertain at once
            ends = max(leases.values()) / 1000 + runtime.SWEEP_EVERY_S + 5
            print(f"waiting {ends - time.time():.0f} s for {len(leases)} held claim(s)")
            while time.time() < ends:
                await asyncio.sleep(1)
                if not crash_checks.held(await crash_checks.snapshot(self.data), 0):
                    break  # no drafting item's claim is `started` any more
        for claim in (await crash_checks.snapshot(self.data)).claims:
            if claim.state == "uncertain":
                # What `gatehouse reconcile-claim` sends the running bot; the fake bills
                # nothing for a call whose caller was killed.
                args = {"claim": claim.id, "amount": "0", "evidence": "fake LLM request log"}
                try:
                    await asyncio.to_thread(control.request, self.data, "reconcile-claim", args)
                except (control.Refused, control.Unavailable, control.NoAnswer) as exc:
                    self.found([f"reconcile-claim {claim.id} failed: {exc}"])
        await self._until_quiet()

    async def final_checks(self) -> None:
        self.found(await crash_checks.at_rest(self.data))
        audit = self.cli("audit", "verify")
        if audit.returncode != 0:
            self.found([f"gatehouse audit verify exited {audit.returncode}: {audit.stdout}"])
        snap = await crash_checks.snapshot(self.data)
        self.found(crash_checks.missing_entries(snap, self.feed.tags()))
        self.held = crash_checks.held(snap, _now_ms())
        self.stuck = crash_checks.orphans(snap, _now_ms())
        self.found([f"item {item} orphaned: {why}" for item, why in self.stuck.items()])
        self.paid = crash_checks.double_paid(snap, self._calls(), self._calls("triage"))
        self.found(self.paid)
        keyed = [
            (r.headers.get("idempotency-key"), r.body, int(r.headers.get("content-length", 0)))
            for r in self._posts()
        ]
        self.found(crash_checks.conflicting_keys(keyed))
        self.items = len(snap.items)
        self.skipped = sum(item.state == "skipped" for item in snap.items)

    def _calls(self, kind: str = "draft") -> collections.Counter[str]:
        requests: list[RecordedRequest] = list(self.llm.requests)
        return crash_checks.provider_calls((r.body for r in requests), kind)

    def _posts(self) -> list[Recorded]:
        return list(self.hook.requests)

    def figures(self, kills: int, operator: crash_parts.Operator, seconds: float) -> dict[str, Any]:
        posts = self._posts()
        cut = sum(len(r.body) < int(r.headers.get("content-length", 0)) for r in posts)
        keys = collections.Counter(r.headers.get("idempotency-key") for r in posts)
        causes = collections.Counter(why.split(" (")[0] for why in self.stuck.values())
        complete = sum(self._calls().values()) + sum(self._calls("triage").values())
        cards = self.api.sent(crash_parts.OPERATOR)
        return {
            "bench": "crash",
            "kills": kills,
            "violations": len(self.violations),
            "orphaned": len(self.stuck),
            "held": len(self.held),
            "double_paid": len(self.paid),
            "cards_repeated": crash_checks.repeated_cards(m.text for m in cards),
            "items": self.items,
            "skipped": self.skipped,
            "entries": len(self.feed.entries),
            "provider_calls": complete,
            "triage_calls": sum(self._calls("triage").values()),
            "provider_requests_cut": self.llm.calls - complete,
            "webhook_posts": len(posts),
            "webhook_resent": sum(n - 1 for n in keys.values()),
            "webhook_posts_cut": cut,
            "taps": len(operator.queries),
            "taps_repeated": len(operator.queries) - len(operator.taps),
            "taps_unanswered": operator.unanswered(),
            "points": dict(sorted(self.fired.items())),
            "points_missed": dict(sorted(self.missed.items())),
            "orphaned_by_cause": dict(causes.most_common()),
            "seconds": round(seconds, 1),
        }


def _now_ms() -> int:
    return int(time.time() * 1000)


async def bench(kills: int, seed: int, tmp: Path, *, wait_leases: bool) -> dict[str, Any]:
    killer = crash_parts.Killer()
    started = time.monotonic()
    with (
        crash_parts.ObservedBotApi(killer) as api,
        FakeLLM() as llm,
        WebhookServer() as hook,
        FeedServer() as feed,
    ):
        llm.observe = lambda phase, request: killer.hit(_point(phase, request))
        llm.answer = triage_answer
        hook.observe = lambda _: killer.hit("dispatch")
        run = Run(
            tmp,
            random.Random(seed),
            {"api": api, "llm": llm, "hook": hook, "feed": feed, "killer": killer},
        )
        operator = crash_parts.Operator(api)
        operator.start()
        try:
            await run.kills(kills)
            await run.settle(wait_leases)
        finally:
            operator.stop.set()
            operator.join()
            if run.bot.proc is not None and run.bot.proc.poll() is None:
                run.bot.kill()
        await run.final_checks()
        for finding in run.violations:
            print(f"violation: {finding}")
        return run.figures(kills, operator, time.monotonic() - started)


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench crash")
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the data directory and log")
    parser.add_argument(
        "--no-wait-leases",
        dest="wait_leases",
        action="store_false",
        help="do not wait out the leases of claims a kill left started (faster; such items"
        " are counted as orphaned and as held)",
    )
    args = common.parse(parser, argv, kills=2, wait_leases=False)
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    if args.keep:
        tmp = Path(tempfile.mkdtemp(prefix="gatehouse-crash-"))
        print(f"data and bot.log kept in {tmp}")
        common.report(await bench(args.kills, args.seed, tmp, wait_leases=args.wait_leases))
        return
    with tempfile.TemporaryDirectory(prefix="gatehouse-crash-") as name:
        common.report(await bench(args.kills, args.seed, Path(name), wait_leases=args.wait_leases))
