"""End to end on PostgreSQL: three `gatehouse run` workers share one database, the local
Bot API server and a feed of 300 entries; the leader is SIGKILLed mid-run.

Items are drafted by the LLM drafter against a fake provider, so each holds and
settles a budget claim. The leader is killed once every item is drafted, while its
cards are still going out and while its sealer is in the middle of a batch (held
there by a row lock the test takes on one of the batch's events). Shown: another
worker leads and answers a command within 10 s; every entry becomes exactly one item
and one card (a card the dead leader was sending when it died may be sent again: the
documented send window); every item is dispatched, no webhook key carries two
bodies, every claim is settled exactly once and `gatehouse audit verify` passes on
every worker, with no key given and nothing left unsealed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest

from bot.demo.botapi import localapi
from bot.demo.botapi import state as localapi_state
from store import sql
from tests import pg_databases
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM
from tests.fakes.webhook_server import WebhookServer

TOKEN = "987654:scale-secret-token-value_ABCDEFGHIJKLMNOP"
OPERATOR = 1001
ENTRIES = 300
WORKERS = 3
#: The leader's lease in the test: failover within about this long.
TTL_S = 3
#: The longest the test waits for the whole flow (a bound, not a speed).
FLOW_S = 240.0
T = TypeVar("T")

PIPELINE = """\
name: news
schedule: 1h
sources:
  - type: rss
    url: {url}
    scope: scale
draft:
  drafter: llm
  prompt: ask.txt
  max_tokens: 200
approval:
  quorum: 1
dispatch:
  type: webhook
  url: {hook}
  timeout: 5
"""


class Worker:
    """One `python -m bot` process on the shared database."""

    def __init__(
        self, tmp: Path, n: int, api: localapi.LocalBotApi, url: str, llm: FakeLLM
    ) -> None:
        self.dir = tmp / f"worker{n}"
        self.dir.mkdir()
        self.log = self.dir / "bot.log"
        self.env = {
            **os.environ,
            "PTB_TIMEDELTA": "1",
            "GATEHOUSE_DATABASE_URL": url,
            "GATEHOUSE_TELEGRAM__TOKEN": TOKEN,
            "GATEHOUSE_TELEGRAM__BASE_URL": api.base_url,
            "GATEHOUSE_TELEGRAM__OPERATORS": str(OPERATOR),
            "GATEHOUSE_TELEGRAM__RATE_LIMIT_PER_MINUTE": "0",
            # Slow enough that cards are still going out when every item is drafted.
            "GATEHOUSE_TELEGRAM__CHAT_MESSAGES_PER_SECOND": "20",
            "GATEHOUSE_TELEGRAM__FLOOD_LIMIT_PER_SECOND": "500",
            "GATEHOUSE_CLUSTER__LEASE_TTL_S": str(TTL_S),
            "GATEHOUSE_CLUSTER__DISPATCH_LEASE_S": "10",
            "GATEHOUSE_DATA_DIR": str(self.dir / "data"),
            "GATEHOUSE_PIPELINES_DIR": str(tmp / "pipelines"),
            "GATEHOUSE_LOG_LEVEL": "INFO",
            "GATEHOUSE_LLM__KIND": "openai",
            "GATEHOUSE_LLM__BASE_URL": llm.base_url,
            "GATEHOUSE_LLM__API_KEY": "llm-key",
            "GATEHOUSE_LLM__MODEL": "fake-model",
            "GATEHOUSE_PRICES": json.dumps(
                {"fake-model": {"input_micros_per_mtok": 1, "output_micros_per_mtok": 1}}
            ),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bot"], cwd=self.dir, env=self.env, stdout=out, stderr=out
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@pytest.fixture
def database() -> Iterator[str]:
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    name = f"gh_pgscale_e2e_{os.getpid()}"
    server.drop(name)
    try:
        yield server.create(name)
    finally:
        server.drop(name)


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return list(conn.execute(sql).fetchall())


def leader_pid(url: str) -> int | None:
    try:
        rows = query(url, "SELECT holder FROM leases WHERE name = 'leader'")
    except psycopg.errors.UndefinedTable:  # the first worker is still migrating
        return None
    return int(rows[0][0].split(":")[1]) if rows else None


def cards(api: localapi.LocalBotApi) -> list[localapi_state.ChatMessage]:
    """Every card as it was first sent (a decision edits its buttons away)."""
    firsts = [api.history(OPERATOR, m.message_id)[0] for m in api.sent(OPERATOR)]
    return [m for m in firsts if m.reply_markup and "item " in m.text]


def approve_data(message: localapi_state.ChatMessage) -> str:
    assert message.reply_markup is not None
    for row in message.reply_markup["inline_keyboard"]:
        for key in row:
            if "Approve" in key["text"]:
                return str(key["callback_data"])
    raise AssertionError(f"no Approve button on {message.text!r}")


def item_of(message: localapi_state.ChatMessage) -> int:
    return int(message.text.split("item ", 1)[1].split()[0])


# Three bot processes, a SIGKILL and a takeover: on two busy cores this outlasts the suite's
# 60 s hang guard without anything being stuck.
@pytest.mark.timeout(240)
def test_three_workers_share_the_work_and_survive_the_leader_dying(
    tmp_path: Path, database: str
) -> None:
    entries = [(f"g{i}", f"Story {i}", f"Body {i}") for i in range(ENTRIES)]
    with (
        localapi.LocalBotApi(token=TOKEN) as api,
        FeedServer() as feed,
        WebhookServer() as hook,
        FakeLLM() as llm,
    ):
        feed.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        (tmp_path / "pipelines").mkdir()
        (tmp_path / "pipelines" / "news.yaml").write_text(
            PIPELINE.format(url=feed.url("/feed.xml"), hook=hook.url)
        )
        (tmp_path / "pipelines" / "ask.txt").write_text("Rewrite for the team:\n{title}\n{text}\n")
        workers = [Worker(tmp_path, n, api, database, llm) for n in range(WORKERS)]
        # The LLM drafter spends only within a budget: set one, as an operator would.
        budget = cli(workers[0], "set-budget", "news", "day", "100")
        assert budget.returncode == 0, budget.stdout + budget.stderr
        for worker in workers:
            worker.start()
        try:
            run_the_flow(api, hook, database, workers)
        finally:
            for worker in workers:
                worker.stop()
        logs = "".join(w.log.read_text() for w in workers)
        assert TOKEN not in logs, "the token reached a log line"
        # Each worker signs with its own key while it leads, endorsed by the deployment
        # key: verify says ok on every worker with no key given.
        for worker in workers:
            verify = cli(worker, "audit", "verify")
            assert verify.returncode == 0, verify.stdout + verify.stderr
            assert "pending" not in verify.stdout, verify.stdout


def cli(worker: Worker, *argv: str) -> subprocess.CompletedProcess[str]:
    """`gatehouse ...` with a worker's settings."""
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        env=worker.env,
        cwd=worker.dir,
        capture_output=True,
        text=True,
        timeout=60,
    )


#: The leader's sealer waiting on a row lock, in the middle of sealing a batch.
SEALER_WAITING = (
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE wait_event_type = 'Lock' AND query LIKE '%UPDATE events SET seq%'"
)
#: The sealing lock, taken as the sealer takes it before a batch (store/sql/postgres).
LOCK_HEAD = sql.parse((sql.POSTGRES_DIR / "events.sql").read_text())["lock_head"]


@contextlib.contextmanager
def sealer_held_mid_batch(url: str, worker: Worker) -> Iterator[None]:
    """Hold the sealer still between the head and three new events, then let it seal
    the first two and wait on the third: the body runs with the batch half done."""
    with psycopg.connect(url) as head, psycopg.connect(url) as last:
        # The sealer's next batch waits for it (a transaction's advisory lock: held until
        # the rollback below).
        head.execute(LOCK_HEAD)
        for usd in ("101", "102", "103"):  # three audited changes, as an operator makes
            made = cli(worker, "set-budget", "news", "day", usd)
            assert made.returncode == 0, made.stdout + made.stderr
        unsealed = [r[0] for r in last.execute("SELECT id FROM events WHERE seq IS NULL")]
        assert len(unsealed) >= 3, unsealed
        last.execute("SELECT id FROM events WHERE id = %s FOR UPDATE", (max(unsealed),))
        head.rollback()
        wait_for(lambda: query(url, SEALER_WAITING)[0][0] == 1, 30, "the sealer mid-batch")
        yield
        last.rollback()


def run_the_flow(
    api: localapi.LocalBotApi, hook: WebhookServer, url: str, workers: list[Worker]
) -> None:
    pids = {w.pid: w for w in workers}
    first = wait_for(lambda: leader_pid(url) in pids and leader_pid(url), 60, "a leader")
    drafted = "SELECT count(*) FROM items WHERE state = 'awaiting_approval'"
    wait_for(lambda: query(url, drafted)[0][0] == ENTRIES, FLOW_S, "every item drafted")
    assert len(cards(api)) < ENTRIES, "every card went out before the kill"

    # Mid-run: cards are still going out, nothing is approved yet, and the sealer has
    # sealed part of a batch it has not committed.
    with sealer_held_mid_batch(url, workers[1]):
        pids[first].kill()
    killed_at = time.monotonic()
    before = len(api.sent(OPERATOR))
    api.inject_command(OPERATOR, OPERATOR, "/status")
    reply = wait_for(
        lambda: [m for m in api.sent(OPERATOR)[before:] if "leader: " in m.text],
        30,
        "a new leader's answer",
    )[0]
    answered_s = time.monotonic() - killed_at
    second = leader_pid(url)
    assert second in pids and second != first
    assert answered_s < 10, f"a new leader answered only after {answered_s:.1f} s"
    assert f"cluster: {WORKERS - 1} of {WORKERS} workers alive" in reply.text, reply.text
    named = reply.text.split("leader: ", 1)[1].split()[0]  # host:pid:tag
    assert named.split(":")[1] == str(second), reply.text

    tapped: set[int] = set()

    def approve_all() -> bool:
        for card in cards(api):
            if card.message_id not in tapped:
                tapped.add(card.message_id)
                api.inject_callback(OPERATOR, OPERATOR, card.message_id, approve_data(card))
        done = query(url, "SELECT count(*) FROM items WHERE state = 'dispatched'")[0][0]
        return int(done) == ENTRIES

    wait_for(approve_all, FLOW_S, f"{ENTRIES} dispatched items")

    guids = [row[0] for row in query(url, "SELECT source_id FROM items")]
    assert sorted(guids) == sorted(f"g{i}" for i in range(ENTRIES))

    shown = Counter(item_of(card) for card in cards(api))
    assert set(shown) == {int(r[0]) for r in query(url, "SELECT id FROM items")}
    twice = [item for item, n in shown.items() if n > 1]
    assert len(twice) <= 1 and all(shown[item] == 2 for item in twice), shown.most_common(3)

    bodies: defaultdict[str, set[bytes]] = defaultdict(set)
    for request in hook.requests:
        bodies[request.headers["idempotency-key"]].add(request.body)
    assert len(bodies) == ENTRIES
    assert all(len(sent) == 1 for sent in bodies.values())
    # Claimed rows go out once; only a row a dead worker held may go again (same key).
    sends = Counter(request.headers["idempotency-key"] for request in hook.requests)
    assert len([key for key, n in sends.items() if n > 1]) <= 1, sends.most_common(3)
    delivered = Counter(json.loads(next(iter(sent)))["item_id"] for sent in bodies.values())
    assert all(n == 1 for n in delivered.values())

    ended = query(
        url,
        "SELECT entity_id, count(*) FROM events WHERE entity = 'claim'"
        " AND to_state IN ('settled', 'released') GROUP BY entity_id",
    )
    assert len(ended) == ENTRIES and all(n == 1 for _, n in ended), ended[:3]
    assert query(url, "SELECT count(*) FROM claims WHERE state != 'settled'")[0][0] == 0
