"""The crash bench (bench/crash.py): a short run of the real bot under SIGKILL, and each of
its checks provoked on a real store so that it is known to be able to fail.

Select the short run alone with `pytest -m crash`.
"""

from __future__ import annotations

import collections
import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from bench import crash_checks
from store import db, items, ledger
from store.audit import events, sealer
from store.intake import seen
from store.items.machine import State
from tests.fakes.llm_server import FakeLLM
from tests.fakes.webhook_server import WebhookServer

ROOT = Path(__file__).resolve().parents[2]
KILLS = 20


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_twenty_kills_break_nothing(tmp_path: Path) -> None:
    """The real bot killed 20 times: nothing orphaned, paid twice or broken. The scripted
    operator settles each claim a kill left uncertain, as its alert asks."""
    done = subprocess.run(
        [sys.executable, "-m", "bench", "crash", "--kills", str(KILLS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["bench"] == "crash" and report["kills"] == KILLS
    points = collections.Counter(report["points"]) + collections.Counter(report["points_missed"])
    assert sum(points.values()) == KILLS and set(points) == {
        "random",
        "triage",
        "reserve",
        "answered",
        "card",
        "dispatch",
    }
    assert report["items"] == report["entries"] == 3 * KILLS
    assert report["skipped"] >= 1 and report["triage_calls"] <= report["entries"]
    # A kill at "dispatch" resends with the same key: seen here, so that counter is known to
    # count. A kill at "card" need not repeat its card (the operator may tap the card the
    # server kept before the restarted bot would send it again, and a decided item's card is
    # not sent): test_cards_sent_twice_for_one_version_are_counted shows that counter counts.
    if report["points"].get("dispatch"):
        assert report["webhook_resent"] >= 1, done.stdout
    assert (report["violations"], report["orphaned"], report["double_paid"]) == (0, 0, 0), (
        done.stdout[-3000:]
    )


# -- each check, provoked ----------------------------------------------------------------


async def _store_with_one_item(data_dir: Path, now: datetime) -> int:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        item = await store.write(
            items.create_sync, "news", "s0", "crash-00001", {"title": "t"}, now
        )
        assert item is not None
        await store.write(seen.mark_seen_sync, "news", "s0", ["crash-00001"], now)
        await sealer.seal(store)  # as the bot's leader would within 100 ms
        return item.id
    finally:
        await store.close()


async def _write(data_dir: Path, unit: object) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await store.write(unit)  # type: ignore[arg-type]
    finally:
        await store.close()


async def test_a_clean_store_passes_every_at_rest_check(data_dir: Path, now: datetime) -> None:
    await _store_with_one_item(data_dir, now)
    assert await crash_checks.at_rest(data_dir) == []


async def test_an_entry_marked_seen_without_its_item_is_found(
    data_dir: Path, now: datetime
) -> None:
    await _store_with_one_item(data_dir, now)
    await _write(data_dir, lambda c: seen.mark_seen_sync(c, "news", "s0", ["crash-00002"], now))
    assert await crash_checks.at_rest(data_dir) == [
        "entry crash-00002 (news/s0) marked seen but has no item"
    ]


async def test_an_edited_event_breaks_the_audit(data_dir: Path, now: datetime) -> None:
    await _store_with_one_item(data_dir, now)
    conn = sqlite3.connect(data_dir / "gatehouse.db")
    try:
        conn.execute("DROP TRIGGER events_no_update")
        conn.execute("UPDATE events SET reason = 'nothing happened' WHERE id = 1")
        conn.commit()
    finally:
        conn.close()
    [finding] = await crash_checks.at_rest(data_dir)
    assert finding.startswith("audit verify: hash chain broken")


async def test_a_claim_settled_twice_is_found(data_dir: Path, now: datetime) -> None:
    await _store_with_one_item(data_dir, now)

    def settle_twice(conn: sqlite3.Connection) -> None:
        for _ in range(2):
            events.append(conn, "claim", 7, "started", "settled", "system", now)

    await _write(data_dir, settle_twice)
    assert await crash_checks.at_rest(data_dir) == ["claim 7 settled 2 times"]
    snap = await crash_checks.snapshot(data_dir)
    assert crash_checks.double_paid(snap, collections.Counter()) == ["claim 7: settlement 2"]


async def test_a_corrupted_file_fails_the_integrity_check(data_dir: Path, now: datetime) -> None:
    await _store_with_one_item(data_dir, now)
    path = data_dir / "gatehouse.db"
    pages = bytearray(path.read_bytes())
    page = 4096
    assert len(pages) > 3 * page
    pages[2 * page + 8 : 3 * page] = b"\xa5" * (page - 8)  # a b-tree page, header kept
    path.write_bytes(bytes(pages))
    findings = await crash_checks.at_rest(data_dir)
    assert findings and any(
        f.startswith(("PRAGMA integrity_check", "reading the store failed")) for f in findings
    ), findings


async def test_items_left_in_drafting_are_orphans_with_their_claim_story(
    data_dir: Path, now: datetime
) -> None:
    item_id = await _store_with_one_item(data_dir, now)
    await _write(
        data_dir, lambda c: items.transition_sync(c, item_id, State.DRAFTING, "system", now)
    )
    snap = await crash_checks.snapshot(data_dir)
    assert crash_checks.orphans(snap, 0) == {
        item_id: "drafting, no claim (never reached the ledger)"
    }
    assert crash_checks.held(snap, 0) == {}

    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await ledger.set_budget(store, ledger.Limit("global", "month", 10_000_000), "cli", now)
        work = await ledger.begin(
            store,
            ledger.Call("k", "llm.draft", {}, 1000, "news", item_id, timedelta(minutes=1)),
            now,
        )
        await ledger.start_provider(store, work.id, now)
    finally:
        await store.close()
    snap = await crash_checks.snapshot(data_dir)
    lease_end = next(c.lease_until for c in snap.claims)
    assert crash_checks.held(snap, lease_end - 1) == {item_id: lease_end}
    assert crash_checks.held(snap, lease_end) == {}
    assert crash_checks.orphans(snap, lease_end)[item_id] == (
        "drafting, claim started, lease expired (the call may have reached the provider)"
    )
    await _write(data_dir, lambda c: items.transition_sync(c, item_id, State.BREACH, "sweep", now))
    snap = await crash_checks.snapshot(data_dir)
    assert crash_checks.orphans(snap, lease_end) == {
        item_id: "breach (left in drafting or dispatching until its SLA)"
    }


async def test_provider_calls_and_claims_beyond_the_attempt_are_double_paid(
    data_dir: Path, now: datetime
) -> None:
    item_id = await _store_with_one_item(data_dir, now)
    snap = await crash_checks.snapshot(data_dir)
    prompt = {"messages": [{"role": "user", "content": "Story crash-00001"}]}
    once = crash_checks.provider_calls([prompt, "half a requ"])  # a cut request is no call
    assert once == collections.Counter({"crash-00001": 1})
    assert crash_checks.double_paid(snap, once) == []
    twice = crash_checks.provider_calls([prompt, prompt])
    assert crash_checks.double_paid(snap, twice) == [
        f"item {item_id}: provider call 2 for 1 attempt(s)"
    ]
    assert crash_checks.missing_entries(snap, ["crash-00001", "crash-00002"]) == [
        "feed entry crash-00002 has no item"
    ]

    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await ledger.set_budget(store, ledger.Limit("global", "month", 10_000_000), "cli", now)
        for key in ("news:1:1:v1", "news:1:1:v2"):  # two claims for one attempt
            await ledger.begin(
                store,
                ledger.Call(key, "llm.draft", {}, 1000, "news", item_id, timedelta(minutes=1)),
                now,
            )
    finally:
        await store.close()
    snap = await crash_checks.snapshot(data_dir)
    assert crash_checks.double_paid(snap, once) == [f"item {item_id}: claim 2 for 1 attempt(s)"]


async def test_a_second_triage_call_or_claim_for_an_entry_is_double_paid(
    data_dir: Path, now: datetime
) -> None:
    item_id = await _store_with_one_item(data_dir, now)
    question = {"messages": [{"role": "user", "content": "Question: worth it?\ncrash-00001"}]}
    draft = {"messages": [{"role": "user", "content": "Story crash-00001"}]}
    bodies = [question, draft]
    drafts = crash_checks.provider_calls(bodies)
    asked = crash_checks.provider_calls(bodies, "triage")
    assert (drafts, asked) == ({"crash-00001": 1}, {"crash-00001": 1})
    snap = await crash_checks.snapshot(data_dir)
    assert crash_checks.double_paid(snap, drafts, asked) == []
    twice = crash_checks.provider_calls([question, question], "triage")
    assert crash_checks.double_paid(snap, drafts, twice) == [f"item {item_id}: triage call 2"]

    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await ledger.set_budget(store, ledger.Limit("global", "month", 10_000_000), "cli", now)
        for key, endpoint in (("t0", "llm.triage"), ("d1", "llm.draft"), ("t1", "llm.triage")):
            await ledger.begin(
                store,
                ledger.Call(key, endpoint, {}, 1000, "news", item_id, timedelta(minutes=1)),
                now,
            )
    finally:
        await store.close()
    snap = await crash_checks.snapshot(data_dir)
    assert crash_checks.double_paid(snap, drafts, asked) == [
        f"item {item_id}: claim 3 for 1 attempt(s)"
    ]


def test_a_webhook_key_with_two_bodies_is_a_violation() -> None:
    same = [("k1", b"ab", 2), ("k1", b"ab", 2), ("k2", b"cd", 2)]
    assert crash_checks.conflicting_keys(same) == []
    cut = [("k1", b"ab", 2), ("k1", b"a", 2)]  # a body cut short by a kill in transit
    assert crash_checks.conflicting_keys(cut) == []
    assert crash_checks.conflicting_keys([("k1", b"ab", 2), ("k1", b"abc", 3)]) == [
        "idempotency key k1 sent with 2 different bodies [2, 3]"
    ]
    assert crash_checks.conflicting_keys([(None, b"a", 1)]) == [
        "a webhook request without an Idempotency-Key"
    ]


def test_cards_sent_twice_for_one_version_are_counted() -> None:
    card = "📝 <b>news</b> · item 3\n\ntext\n\n<i>version 1 · attempt 1 · drafter llm</i>"
    edited = card + "\n\n✅ approved by 42"
    other = card.replace("version 1", "version 2")
    assert crash_checks.repeated_cards([card, other, "an alert"]) == 0
    assert crash_checks.repeated_cards([card, edited, other]) == 1


async def test_the_fakes_report_each_request_before_answering_it(
    client: httpx.AsyncClient,
) -> None:
    seen: list[tuple[str, str]] = []
    with FakeLLM() as llm, WebhookServer() as hook:
        llm.observe = lambda phase, request: seen.append((phase, request.path))
        hook.observe = lambda request: seen.append(("webhook", request.headers["x-n"]))
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        await client.post(llm.base_url + "/chat/completions", json=body)
        await client.post(hook.url, content=b"{}", headers={"x-n": "1"})
    assert seen == [
        ("request", "/v1/chat/completions"),
        ("answered", "/v1/chat/completions"),
        ("webhook", "1"),
    ]
