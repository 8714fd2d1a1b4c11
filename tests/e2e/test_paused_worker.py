"""End to end on PostgreSQL: a worker paused (SIGSTOP) with LLM calls in flight, past
its run's lease, while two other workers go on; then it wakes (SIGCONT).

Another worker closes the paused worker's run as interrupted and takes its items up
again; it finds their claims started (the calls may still answer), makes no second
call and leaves the items in drafting, saying so in its log. The paused worker wakes,
reads the replies and records them: every paid draft reaches a card, no item fails,
every claim settles once and the provider was called once per item.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from bot.demo.botapi import localapi
from tests.e2e.test_scale_out import (
    PIPELINE,
    TOKEN,
    Worker,
    cards,
    cli,
    database,  # noqa: F401 (a fixture)
    item_of,
    query,
    wait_for,
)
from tests.fakes import feeds
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM, RecordedRequest
from tests.fakes.webhook_server import WebhookServer

ENTRIES = 6
WORKERS = 3
#: Bounds for the test, not speeds: a loaded machine is slow.
WITHIN_S = 60.0

RUNNING = "SELECT worker FROM pipeline_runs WHERE status = 'running'"
#: A run of the pipeline that ended after the paused worker's run was closed.
TAKEN_OVER = (
    "SELECT count(*) FROM pipeline_runs WHERE status != 'running' AND worker != %s"
    " AND started_at > (SELECT min(ended_at) FROM pipeline_runs"
    "                    WHERE error_text LIKE 'interrupted%%')"
)


@pytest.mark.timeout(300)
def test_a_worker_paused_with_calls_in_flight_past_its_lease_keeps_every_paid_draft(
    tmp_path: Path,
    database: str,  # noqa: F811
) -> None:
    entries = [(f"p{i}", f"Story {i}", f"Body {i}") for i in range(ENTRIES)]
    replies = threading.Event()

    def hold(moment: str, _: RecordedRequest) -> None:
        if moment == "request":  # every call waits, in flight, until the test lets go
            replies.wait(WITHIN_S)

    with (
        localapi.LocalBotApi(token=TOKEN) as api,
        FeedServer() as feed,
        WebhookServer() as hook,
        FakeLLM() as llm,
    ):
        llm.observe = hold
        feed.set("/feed.xml", feeds.rss(entries), "application/rss+xml")
        (tmp_path / "pipelines").mkdir()
        (tmp_path / "pipelines" / "news.yaml").write_text(
            PIPELINE.format(url=feed.url("/feed.xml"), hook=hook.url)
        )
        (tmp_path / "pipelines" / "ask.txt").write_text("Rewrite for the team:\n{title}\n{text}\n")
        workers = [Worker(tmp_path, n, api, database, llm) for n in range(WORKERS)]
        budget = cli(workers[0], "set-budget", "news", "day", "100")
        assert budget.returncode == 0, budget.stdout + budget.stderr
        for worker in workers:
            worker.start()
        try:
            wait_for(lambda: llm.calls == ENTRIES, WITHIN_S, "every call in flight")
            holder = str(query(database, RUNNING)[0][0])
            [paused] = [w for w in workers if f":{w.pid}:" in holder]
            assert paused.proc is not None
            paused.proc.send_signal(signal.SIGSTOP)
            try:
                # Its run's lease lapses; another worker closes the run and takes the
                # pipeline up again, finding every claim started.
                wait_for(
                    lambda: query(database, TAKEN_OVER % _quoted(holder))[0][0] > 0,
                    WITHIN_S,
                    "another worker's run over the paused worker's items",
                )
                replies.set()
            finally:
                paused.proc.send_signal(signal.SIGCONT)
            settled = "SELECT count(*) FROM claims WHERE state IN ('started', 'reserved')"
            wait_for(lambda: query(database, settled)[0][0] == 0, WITHIN_S, "every reply")
            drafting = "SELECT count(*) FROM items WHERE state IN ('new', 'drafting')"
            wait_for(lambda: query(database, drafting)[0][0] == 0, WITHIN_S, "every item on")
            states = query(database, "SELECT state, count(*) FROM items GROUP BY state")
            assert states == [("awaiting_approval", ENTRIES)], states
            wait_for(lambda: len(cards(api)) >= ENTRIES, WITHIN_S, "every card")
        finally:
            replies.set()
            for worker in workers:
                worker.stop()

        assert llm.calls == ENTRIES, "a call was made twice"
        shown = sorted(item_of(card) for card in cards(api))
        assert shown == sorted(int(r[0]) for r in query(database, "SELECT id FROM items"))
        claims = query(database, "SELECT state, count(*) FROM claims GROUP BY state")
        assert claims == [("settled", ENTRIES)], claims
        settled = query(
            database,
            "SELECT entity_id, count(*) FROM events WHERE entity = 'claim'"
            " AND to_state IN ('settled', 'uncertain', 'released') GROUP BY entity_id",
        )
        assert len(settled) == ENTRIES and all(n == 1 for _, n in settled), settled
        others = "".join(w.log.read_text() for w in workers if w is not paused)
        assert "waits in drafting for that reply" in others, "the takeover was not logged"
        woke = paused.log.read_text()
        assert "Traceback" not in woke and "IllegalTransition" not in woke, woke


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
