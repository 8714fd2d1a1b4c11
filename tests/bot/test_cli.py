"""The `gatehouse` CLI as a subprocess against real SQLite files: reads beside a writer,
writes through the running bot's control socket (or refused naming the writer's pid),
audit verify on a tampered chain, backup, reconcile, and argument errors."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot import early
from bot.process import control
from pipelines import operations
from pipelines.dispatch import file as dispatch_file
from pipelines.service import runtime as runtime_mod
from store import db, drafts, items, ledger, outbox
from store.audit import events, sealer
from store.backends import datadir, sqlite_store
from store.intake import timetable
from store.items.machine import State
from store.reports import info
from tests import running, snapshot

PIPELINE = """\
name: news
schedule: 1h
sources:
  - type: folder
    path: {notes}
dispatch:
  type: file
  path: {out}
"""


@pytest.fixture
def pipelines_dir(tmp_path: Path) -> Path:
    (tmp_path / "notes").mkdir()
    folder = tmp_path / "pipelines"
    folder.mkdir()
    text = PIPELINE.format(notes=tmp_path / "notes", out=tmp_path / "out")
    (folder / "news.yaml").write_text(text)
    return folder


def env(data_dir: Path, pipelines_dir: Path) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")},
        "GATEHOUSE_DATA_DIR": str(data_dir),
        "GATEHOUSE_PIPELINES_DIR": str(pipelines_dir),
    }


async def gatehouse(data_dir: Path, pipelines_dir: Path, *args: str) -> tuple[int, str, str]:
    """Run the CLI in a subprocess without blocking this loop (a runtime may serve in it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", *args,
        cwd=data_dir.parent, env=env(data_dir, pipelines_dir),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def dropped_item(store: db.Store, now: datetime) -> items.Item:
    source_id = f"{now:%H%M}.md"  # one item per minute of `now`
    item = await store.write(
        items.create_sync, "news", "notes", source_id, {"title": "A note"}, now
    )
    assert item is not None
    return await store.write(
        items.transition_sync, item.id, State.FAILED, "system", now, reason="boom"
    )


async def tables_at(data_dir: Path) -> snapshot.Tables:
    """Every table, read by a read-only store opened for the purpose."""
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    try:
        return await snapshot.tables(store)
    finally:
        await store.close()


@pytest.fixture
async def runtime(data_dir: Path, pipelines_dir: Path) -> AsyncIterator[runtime_mod.Runtime]:
    async with running.with_control(data_dir, pipelines_dir) as started:
        yield started


# -- writes while the bot runs --------------------------------------------------------------


async def test_writes_go_through_the_running_bot(
    runtime: runtime_mod.Runtime, data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    sock = control.socket_path(data_dir)
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert datadir.is_locked(data_dir) == os.getpid()  # this process is the one writer
    item = await dropped_item(runtime.store, now - timedelta(minutes=5))

    code, out, err = await gatehouse(data_dir, pipelines_dir, "set-budget", "global", "day", "7.5")
    assert code == 0, err
    assert f"pid {os.getpid()}" in err and "$7.50" in out
    report = await ledger.report(runtime.store, datetime.now(UTC))
    assert [(b.scope, b.period, b.limit_micros) for b in report.budgets] == [
        ("global", "day", 7_500_000)
    ]
    (set_by,) = await events.for_entity(runtime.store, "budget", "global/day")
    assert (set_by.actor, set_by.to_state) == ("cli", "limit:7500000")

    code, out, err = await gatehouse(data_dir, pipelines_dir, "replay", str(item.id), "--json")
    assert code == 0, err
    assert json.loads(out)["attempt"] == 2
    trail = await events.for_entity(runtime.store, "item", item.id)
    replays = [e for e in trail if e.to_state == State.NEW and e.attempt == 2]
    assert [e.actor for e in replays] == ["cli"]
    # The replay asked the running scheduler for a run: the bot drafts it again.
    for _ in range(500):
        if (await items.get(runtime.store, item.id)).state == State.AWAITING_APPROVAL:
            break
        await asyncio.sleep(0.01)
    assert (await items.get(runtime.store, item.id)).state == State.AWAITING_APPROVAL

    # Refusals from the bot come back as a clear message and exit 2; nothing changes.
    before = await snapshot.tables(runtime.store)
    code, _, err = await gatehouse(data_dir, pipelines_dir, "replay", str(item.id))
    assert code == 2 and "not dropped" in err and "awaiting_approval" in err
    code, _, err = await gatehouse(data_dir, pipelines_dir, "pause", "nwes")
    assert code == 2 and "Did you mean news" in err
    assert await snapshot.tables(runtime.store) == before

    code, out, err = await gatehouse(data_dir, pipelines_dir, "pause", "news")
    assert code == 0 and "paused" in out, err
    assert (await runtime.scheduler.states())["news"].paused
    code, out, err = await gatehouse(data_dir, pipelines_dir, "sweep", "--days", "30", "--json")
    assert code == 0 and json.loads(out) == {"deleted": 0}, err
    code, out, err = await gatehouse(data_dir, pipelines_dir, "health")
    assert code == 0 and f"pid {os.getpid()}" in out, err


async def test_a_writer_without_a_socket_is_refused_by_pid(
    store: db.Store, data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    # A plain writer (no control socket) holds the lock in this process.
    item = await dropped_item(store, now)
    before = await snapshot.tables(store)
    for args in (
        ("set-budget", "global", "month", "20"),
        ("replay", str(item.id)),
        ("sweep", "--days", "1"),
    ):
        code, out, err = await gatehouse(data_dir, pipelines_dir, *args)
        assert code == 2, (args, out, err)
        assert f"pid {os.getpid()}" in err and "nothing was written" in err
    assert await snapshot.tables(store) == before
    assert (await ledger.report(store, now)).budgets == []
    assert (await items.get(store, item.id)).attempt == 1
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "health", "--json")
    assert code == 1 and "does not answer" in json.loads(out)["problem"]


async def test_without_a_bot_the_cli_is_the_writer_for_the_command(
    data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    code, out, err = await gatehouse(data_dir, pipelines_dir, "init")
    assert code == 0 and f"store created: {data_dir / datadir.DB_NAME}" in out, err
    code, out, err = await gatehouse(data_dir, pipelines_dir, "set-budget", "news", "month", "3")
    assert code == 0 and "news/month set to $3.00" in out, err
    assert datadir.is_locked(data_dir) is None  # released when the command ended
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    try:
        (budget,) = (await ledger.report(store, now)).budgets
        assert (budget.scope, budget.limit_micros) == ("news", 3_000_000)
    finally:
        await store.close()


async def test_reconcile_claim_settles_an_uncertain_hold_once(
    data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await ledger.set_budget(store, ledger.Limit("global", "day", 1_000_000), "cli", now)
        work = await ledger.begin(
            store,
            ledger.Call("k", "chat", {"p": 1}, 50_000, "news", None, timedelta(minutes=5)),
            now,
        )
        await ledger.start_provider(store, work.id, now)
        await ledger.fail(store, work.id, "timeout after the request was sent", now)
        uncertain = await snapshot.tables(store)
    finally:
        await store.close()

    code, _, err = await gatehouse(
        data_dir, pipelines_dir, "reconcile-claim", str(work.id), "0.02", " "
    )
    assert code == 2 and "evidence is required" in err
    assert await tables_at(data_dir) == uncertain
    code, out, err = await gatehouse(
        data_dir, pipelines_dir, "reconcile-claim", str(work.id), "0.02", "req_123"
    )
    assert code == 0 and f"claim {work.id} settled at $0.02" in out, err
    code, out, err = await gatehouse(
        data_dir, pipelines_dir, "reconcile-claim", str(work.id), "0.02", "req_123"
    )
    assert code == 0 and "already settled" in out, err
    settled = await tables_at(data_dir)
    code, _, err = await gatehouse(
        data_dir, pipelines_dir, "reconcile-claim", str(work.id), "0.05", "req_123"
    )
    assert code == 2 and "already settled at 20000 micros; reconcile says 50000" in err
    assert await tables_at(data_dir) == settled
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    try:
        (day,) = (await ledger.report(store, now)).budgets
        assert (day.spent_micros, day.held_micros) == (20_000, 0)
    finally:
        await store.close()


async def test_reconcile_claim_uncertain_lists_and_settles_what_the_filters_find(
    data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await ledger.set_budget(store, ledger.Limit("global", "day", 1_000_000), "cli", now)
        found = {}
        for key, pipeline, worst, at in (
            ("a", "news", 1_000, now), ("b", "news", 2_000, now),
            ("c", "news", 4_000, now + timedelta(minutes=10)), ("d", "sport", 8_000, now),
        ):  # fmt: skip
            work = await ledger.begin(
                store,
                ledger.Call(key, "chat", {"p": key}, worst, pipeline, None, timedelta(hours=1)),
                now,
            )
            await ledger.start_provider(store, work.id, now)
            await ledger.fail(store, work.id, "cut off by the stop", at)
            found[key] = work.id
        before = await snapshot.tables(store)
    finally:
        await store.close()

    code, _, err = await gatehouse(
        data_dir, pipelines_dir, "reconcile-claim", "--uncertain", "--at", "zero"
    )
    assert code == 2 and "--uncertain needs --at zero|reserve and --evidence TEXT" in err
    code, _, err = await gatehouse(data_dir, pipelines_dir, "reconcile-claim", "7")
    assert code == 2 and "reconcile-claim needs <claim> <usd> <evidence>, or --uncertain" in err
    assert await tables_at(data_dir) == before
    settle = (
        "reconcile-claim", "--uncertain", "--pipeline", "news",
        "--before", f"{now + timedelta(minutes=5):%Y-%m-%dT%H:%M}", "--at", "reserve",
        "--evidence", "console: charged",
    )  # fmt: skip
    # One transaction: a fault at the second settlement leaves the first unwritten too.
    raw = sqlite3.connect(data_dir / "gatehouse.db", isolation_level=None)
    raw.execute(
        "CREATE TRIGGER fault BEFORE UPDATE OF state ON claims "
        f"WHEN NEW.id = {found['b']} BEGIN SELECT RAISE(ABORT, 'a disk fault'); END"
    )
    raw.close()
    code, _, err = await gatehouse(data_dir, pipelines_dir, *settle)
    assert code != 0 and "a disk fault" in err
    raw = sqlite3.connect(data_dir / "gatehouse.db", isolation_level=None)
    raw.execute("DROP TRIGGER fault")
    raw.close()
    assert await tables_at(data_dir) == before
    code, out, err = await gatehouse(data_dir, pipelines_dir, *settle)
    assert code == 0, err
    assert out.splitlines() == [
        f"claim {found['a']} · news no item · settled at $0.001 of $0.001 held",
        f"claim {found['b']} · news no item · settled at $0.002 of $0.002 held",
        "2 uncertain claim(s) settled at $0.003 in one transaction; their items go on at "
        "the next run",
    ]
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    try:
        states = {key: (await ledger.get(store, claim_id)).state for key, claim_id in found.items()}
        assert states == {"a": "settled", "b": "settled", "c": "uncertain", "d": "uncertain"}
        (day,) = (await ledger.report(store, now)).budgets
        assert (day.spent_micros, day.held_micros) == (3_000, 12_000)
    finally:
        await store.close()


async def test_reconcile_claim_uncertain_goes_through_the_running_bot(
    runtime: runtime_mod.Runtime, data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    store = runtime.store
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000_000), "cli", now)
    work = await ledger.begin(
        store, ledger.Call("k", "chat", {"p": 1}, 3_000, "news", None, timedelta(hours=1)), now
    )
    await ledger.start_provider(store, work.id, now)
    await ledger.fail(store, work.id, "cut off by the stop", now)
    code, out, err = await gatehouse(
        data_dir, pipelines_dir, "reconcile-claim", "--uncertain", "--before",
        f"{now + timedelta(minutes=1):%Y-%m-%dT%H:%M}", "--at", "zero", "--evidence", "none",
    )  # fmt: skip
    assert code == 0 and f"pid {os.getpid()}" in err, err
    assert f"claim {work.id} · news no item · settled at $0.00 of $0.003 held" in out
    settled = await ledger.get(store, work.id)
    assert (settled.state, settled.actual_micros, settled.evidence) == ("settled", 0, "none")


# -- reads beside the writer ---------------------------------------------------------------


async def test_reads_work_while_the_writer_holds_the_store(
    store: db.Store, data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    item = await dropped_item(store, now)
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000_000), "cli", now)

    code, out, err = await gatehouse(data_dir, pipelines_dir, "status", "--json")
    assert code == 0, err
    status = json.loads(out)
    assert status["writer_pid"] == os.getpid()
    assert [p["name"] for p in status["overview"]["pipelines"]] == ["news"]

    code, out, _ = await gatehouse(data_dir, pipelines_dir, "history", str(item.id))
    assert code == 0 and "failed" in out and "gatehouse replay" in out
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "budget", "--json")
    assert code == 0 and json.loads(out)["budgets"][0]["limit_micros"] == 1_000_000
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "status")
    assert code == 0 and f"running as pid {os.getpid()}" in out
    expected = {
        ("pending",): "Nothing is awaiting approval.\n",
        ("runs", "news"): "news: last 0 runs, newest first\n  no runs yet\n",
        ("audit", "verify"): "ok: 0 events, the hash chain is intact; 3 pending (not sealed "
        f"into the chain yet, the oldest written {now:%Y-%m-%d %H:%M:%S} UTC)\n",
    }
    before = await snapshot.tables(store)
    for args, shown in expected.items():
        code, out, err = await gatehouse(data_dir, pipelines_dir, *args)
        assert (code, out) == (0, shown), (args, err)
    assert await snapshot.tables(store) == before  # reads write nothing


# -- audit, backup, reconcile ---------------------------------------------------------------


def tamper(db_path: Path, event_id: int) -> None:
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("DROP TRIGGER events_no_update")
        conn.execute("UPDATE events SET reason = 'nothing happened' WHERE id = ?", (event_id,))
        conn.commit()
    finally:
        conn.close()


async def test_audit_verify_names_an_event_edited_behind_the_programs_back(
    data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        for minute in range(3):
            await dropped_item(store, now + timedelta(minutes=minute))
        await sealer.seal(store)
    finally:
        await store.close()
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "audit", "verify")
    assert code == 0 and "ok: 6 events" in out

    tamper(data_dir / datadir.DB_NAME, 4)
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "audit", "verify")
    assert code == 1 and "event 4" in out and "edited" in out
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "audit", "verify", "--json")
    assert code == 1 and json.loads(out)["broken"]["event_id"] == 4


async def test_backup_is_online_verified_and_never_overwrites(
    store: db.Store, data_dir: Path, pipelines_dir: Path, tmp_path: Path, now: datetime
) -> None:
    for minute in range(20):
        await dropped_item(store, now + timedelta(minutes=minute))
    await sealer.seal(store)  # no leader runs here to seal them
    target = tmp_path / "backup.db"
    code, out, err = await gatehouse(data_dir, pipelines_dir, "backup", str(target))
    assert code == 0, err
    assert "backup: 100%" in err and "row counts match" in out
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    conn = sqlite3.connect(target)
    conn.row_factory = sqlite_store.Row  # as the store's own connections hand rows back
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        copied = conn.execute("SELECT count(*) FROM items").fetchone()[0]
        chain = events.verify_sync(conn)
    finally:
        conn.close()
    assert copied == 20 and chain.ok and chain.checked == (await info.info(store)).rows["events"]

    size = target.stat().st_size
    code, _, err = await gatehouse(data_dir, pipelines_dir, "backup", str(target))
    assert code == 2 and "already exists" in err
    assert target.stat().st_size == size


async def test_reconcile_finds_orphans_and_ghosts_and_fixes_them(
    store: db.Store, data_dir: Path, pipelines_dir: Path, tmp_path: Path, now: datetime
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    item = await store.write(items.create_sync, "news", "notes", "b.md", {"title": "B"}, now)
    assert item is not None

    def dispatched(conn: sqlite3.Connection) -> None:
        drafts.add_sync(conn, item.id, drafts.Body("approved text", {"drafter": "template"}), now)
        payload = {"item_id": item.id, "attempt": 1, "version": 1, "pipeline": "news"}
        row = outbox.enqueue_sync(conn, "dispatch", "news", payload, now, item_id=item.id)
        conn.execute("UPDATE outbox SET state = 'sent' WHERE id = ?", (row,))

    await store.write(dispatched)
    (out_dir / "news-99-v1.md").write_text("---\nitem: 99\nidempotency_key: gh-abc\n---\n\nold\n")
    (out_dir / "notes.md").write_text("someone else's file\n")

    code, out, _ = await gatehouse(data_dir, pipelines_dir, "reconcile", "--json")
    assert code == 1
    (report,) = json.loads(out)
    assert report["ghosts"] == [dispatch_file.file_name("news", item.id, 1)]
    assert sorted(o["name"] for o in report["orphans"]) == ["news-99-v1.md", "notes.md"]

    code, _, err = await gatehouse(data_dir, pipelines_dir, "reconcile", "--backfill")
    assert "backfilled" in err
    written = (out_dir / dispatch_file.file_name("news", item.id, 1)).read_text()
    assert "approved text" in written and "idempotency_key: gh-" in written
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "reconcile", "--prune")
    assert not (out_dir / "news-99-v1.md").exists()
    assert (out_dir / "notes.md").exists() and "not gatehouse's" in out
    assert code == 1  # the foreign file is still there, and still reported


# -- arguments and units --------------------------------------------------------------------


async def test_bad_arguments_say_what_is_valid(
    data_dir: Path, pipelines_dir: Path, store: db.Store
) -> None:
    cases: list[tuple[tuple[str, ...], str]] = [
        (("set-budget", "global", "week", "5"), "choose from 'day', 'month'"),
        (("set-budget", "global", "day", "lots"), "give USD like 25"),
        (("set-budget", "bad scope!", "day", "5"), "valid: 'global' or a pipeline name"),
        (("history", "twelve"), "give a number like 12"),
        (("history", "12345"), "no item 12345"),
        (("runs", "nwes"), "Did you mean news"),
        (("sweep", "--days", "0"), "at least 1"),
        (("audit", "check"), "choose from 'verify'"),
    ]
    before = await snapshot.tables(store)
    for args, expected in cases:
        code, _, err = await gatehouse(data_dir, pipelines_dir, *args)
        assert code == 2 and expected in err, (args, err)
    assert await snapshot.tables(store) == before


async def test_check_reports_pipeline_errors_with_file_and_line(
    data_dir: Path, pipelines_dir: Path
) -> None:
    (pipelines_dir / "bad.yaml").write_text("name: bad\nschedule: 1h\nsources: []\nnope: 1\n")
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "check")
    assert code == 1
    assert "bad.yaml:4: nope:" in out and "GATEHOUSE_TELEGRAM__TOKEN" in out


async def test_check_prints_hostile_files_as_errors_not_tracebacks(
    data_dir: Path, pipelines_dir: Path
) -> None:
    bomb = ["a0: &a0 [lol]"]
    bomb += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 10)]
    (pipelines_dir / "bomb.yaml").write_text("\n".join(bomb) + "\n")
    (pipelines_dir / "deep.yaml").write_text("name: deep\nx: " + "[" * 20_000 + "]" * 20_000)
    code, out, err = await gatehouse(data_dir, pipelines_dir, "check", "--json")
    assert code == 1 and "Traceback" not in out + err
    problems = json.loads(out)["problems"]
    assert f"{pipelines_dir / 'bomb.yaml'}:" in problems[0]
    assert "aliases (&anchor / *alias) expand to more than 20000 values" in problems[0]
    assert problems[1] == f"{pipelines_dir / 'deep.yaml'}:2: nested more than 64 levels deep"
    assert json.loads(out)["pipelines"] == ["news"]


async def test_check_names_a_file_with_a_control_character_and_loads_the_others(
    data_dir: Path, pipelines_dir: Path
) -> None:
    (pipelines_dir / "bell.yaml").write_bytes(b"name: bell\x07\nschedule: 1h\n")
    code, out, err = await gatehouse(data_dir, pipelines_dir, "check", "--json")
    assert code == 1 and "Traceback" not in out + err
    assert json.loads(out)["problems"][0] == (
        f"{pipelines_dir / 'bell.yaml'}:1: invalid YAML: unprintable character U+0007 at"
        " column 11; YAML allows tabs, line breaks and printable characters: remove it"
    )
    assert json.loads(out)["pipelines"] == ["news"]


async def test_check_refuses_a_quorum_the_operators_cannot_reach(
    data_dir: Path, pipelines_dir: Path
) -> None:
    (data_dir.parent / ".env").write_text("GATEHOUSE_TELEGRAM__OPERATORS=11,12\n")
    text = (pipelines_dir / "news.yaml").read_text()
    (pipelines_dir / "news.yaml").write_text(
        text + "approval:\n  quorum: 99999999999999999999999\n"
    )
    code, out, err = await gatehouse(data_dir, pipelines_dir, "check", "--json")
    assert code == 1 and "Traceback" not in out + err
    problems = json.loads(out)["problems"]
    assert problems[0] == (
        f"{pipelines_dir / 'news.yaml'}:10: approval.quorum: quorum 99999999999999999999999"
        " can never be reached: 2 bot operators (GATEHOUSE_TELEGRAM__OPERATORS) may approve;"
        " use a quorum from 1 to 2"
    )
    assert json.loads(out)["pipelines"] == []


async def test_check_warns_about_a_quorum_any_edit_makes_unreachable(
    data_dir: Path, pipelines_dir: Path
) -> None:
    (data_dir.parent / ".env").write_text(
        "GATEHOUSE_TELEGRAM__OPERATORS=11,12,13\n"
        "GATEHOUSE_TELEGRAM__TOKEN=123456789:check-test-token-not-real\n"
    )
    text = (pipelines_dir / "news.yaml").read_text()
    (pipelines_dir / "news.yaml").write_text(
        text + "approval:\n  operators: [11, 12]\n  quorum: 2\n"
    )
    code, out, err = await gatehouse(data_dir, pipelines_dir, "check", "--json")
    # A warning, not an error: the pipeline loads and runs; its edits wait for escalation.
    assert code == 0 and "Traceback" not in out + err, out + err
    checked = json.loads(out)
    assert checked["pipelines"] == ["news"] and checked["problems"] == []
    assert checked["warnings"] == [
        "news: approval: quorum 2 of 2 approvers with four eyes on: after an edit only 1 may "
        "approve the edited version (its author may not), so it waits until it expires; add "
        "an approver or escalate_to, lower the quorum, or set separate_editor: false"
    ]
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "check")
    assert code == 0 and "warning: news: approval: quorum 2 of 2 approvers" in out
    # Three approvers for quorum 2: an edit leaves two, and nothing is said.
    (pipelines_dir / "news.yaml").write_text(
        text + "approval:\n  operators: [11, 12, 13]\n  quorum: 2\n"
    )
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "check", "--json")
    assert code == 0 and json.loads(out)["warnings"] == []


@pytest.mark.parametrize(
    ("text", "micros"), [("25", 25_000_000), ("$12.50", 12_500_000), ("0.000001", 1), ("0", 0)]
)
def test_parse_usd(text: str, micros: int) -> None:
    assert operations.parse_usd(text) == micros


@pytest.mark.parametrize("text", ["-1", "1e400", "nan", "1.0000001", "2000000"])
def test_parse_usd_refuses(text: str) -> None:
    with pytest.raises(operations.Invalid):
        operations.parse_usd(text)


def test_plain_makes_views_json_ready(now: datetime) -> None:
    value: Any = operations.plain({"at": now, "state": State.NEW, "path": Path("/x"), "t": (1, 2)})
    assert json.loads(json.dumps(value)) == {
        "at": now.isoformat(), "state": "new", "path": "/x", "t": [1, 2],
    }  # fmt: skip


def test_the_cli_and_pipeline_files_load_without_the_engine(tmp_path: Path) -> None:
    # A new interpreter: what `gatehouse status` imports to read the settings and a
    # pipeline file with an interval, a feed and a webhook (no cron line, no schema).
    (tmp_path / "p.yaml").write_text(
        "name: p\nschedule: 5m\nsources:\n  - type: rss\n    url: http://127.0.0.1:9/f.xml\n"
        "dispatch:\n  type: webhook\n  url: http://127.0.0.1:9/hook\n"
    )
    code = (
        "import sys; from pathlib import Path; import bot.cli.main\n"
        "from pipelines.config import spec\n"
        f"assert spec.load_dir(Path({str(tmp_path)!r})).pipelines\n"
        "engine = ('httpx', 'feedparser', 'telegram', 'aioimaplib', 'aiosmtplib', 'croniter',"
        " 'jsonschema', 'pipelines.runs.engine')\n"
        "print(sorted(name for name in engine if name in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"


def test_status_lists_pipelines_without_loading_their_models(tmp_path: Path) -> None:
    # The models, schemas, cron parser and signing keys are most of a cold start: `gatehouse status`
    # and `runs` read only each file's name when no bot is running.
    (tmp_path / "p.yaml").write_text("name: p\nschedule: '*/5 * * * *'\n")
    code = (
        "import sys; from pathlib import Path; import bot.cli.main\n"
        "from pipelines.config import names\n"
        f"print(names.declared(Path({str(tmp_path)!r})))\n"
        "heavy = ('pipelines.config.spec', 'croniter', 'jsonschema', 'cryptography',\n"
        "         'pipelines.providers.client', 'store.upkeep.to_postgres', 'bot.demo.content')\n"
        "print(sorted(n for n in heavy if n in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split("\n")[:2] == ["['p']", "[]"]


def test_loading_pauses_the_collector_and_then_freezes_and_resumes_it() -> None:
    assert gc.isenabled()
    frozen_before = gc.get_freeze_count()
    try:
        with early.loading():
            assert not gc.isenabled()
            made = [[index] for index in range(1000)]  # what an import would leave alive
        assert gc.isenabled()
        assert gc.get_freeze_count() >= frozen_before + len(made)
    finally:
        gc.unfreeze()  # the test process's objects go back where the collector sees them


def test_loading_leaves_a_paused_collector_paused() -> None:
    gc.disable()
    try:
        with early.loading():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("argv", [["status"], ["--help"]])
def test_the_gatehouse_command_runs_its_commands_with_the_collector_on(
    tmp_path: Path, argv: list[str]
) -> None:
    # A new interpreter, as the console script starts: the collector is paused only
    # while the command line loads. The store's file only has to exist: status is stubbed.
    (tmp_path / "data").mkdir(mode=0o700)
    (tmp_path / "data" / datadir.DB_NAME).touch()
    code = (
        "import gc, sys; from bot.cli import reads, start\n"
        "reads.cmd_status = lambda *a: print('running', gc.isenabled()) or 0\n"
        f"sys.argv = ['gatehouse', *{argv!r}]\n"
        "try:\n    start.main()\nexcept SystemExit:\n    pass\n"
        "print('after', gc.isenabled())"
    )
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(tmp_path / "data")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.stdout.splitlines()[-1] == "after True"
    if argv == ["status"]:
        assert "running True" in done.stdout


@pytest.mark.parametrize(
    "argv", [["reject", "1"], ["status"], ["set-budget", "global", "day", "1"]]
)
async def test_a_data_dir_without_a_store_is_refused_and_left_alone(
    tmp_path: Path, pipelines_dir: Path, argv: list[str]
) -> None:
    # A mistyped --data-dir during an outage must not read as "the item vanished".
    wrong = tmp_path / "typo"
    code, out, err = await gatehouse(wrong, pipelines_dir, *argv)
    assert (code, out) == (2, "")
    assert f"no store at {wrong / datadir.DB_NAME}" in err
    assert "GATEHOUSE_DATA_DIR (default: ./data" in err and "gatehouse init" in err
    assert not wrong.exists()  # nothing was created there


async def test_init_creates_the_store_once(tmp_path: Path, pipelines_dir: Path) -> None:
    data_dir = tmp_path / "data"
    code, out, err = await gatehouse(data_dir, pipelines_dir, "init", "--json")
    assert code == 0, err
    assert json.loads(out) == {"created": True, "store": str(data_dir / datadir.DB_NAME)}
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "init")
    assert code == 0 and out.startswith("store already there:")
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "pending")
    assert code == 0 and "Nothing is awaiting approval" in out


async def test_status_lists_the_store_pipelines_whose_file_is_gone(
    data_dir: Path, pipelines_dir: Path, now: datetime
) -> None:
    # Items of a pipeline whose file was removed still wait: status must not hide them.
    store = await db.open(db.StoreConfig(data_dir=data_dir))
    try:
        await timetable.ensure(store, "old-digest", None)
        item = await store.write(items.create_sync, "old-digest", "s", "x1", {"title": "x"}, now)
        assert item is not None
        await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)

        def unit(conn: sqlite3.Connection) -> items.Item:
            drafts.add_sync(conn, item.id, drafts.Body("draft", {"drafter": "template"}), now)
            return items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", now)

        await store.write(unit)
    finally:
        await store.close()
    code, out, err = await gatehouse(data_dir, pipelines_dir, "status")
    assert code == 0, err
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if "  " in line}
    assert rows["news"] == "active" and rows["old-digest"] == "no"  # "no file"
    assert "old-digest: no pipeline file: 1 item still waiting, and nothing will run it" in out
    code, out, _ = await gatehouse(data_dir, pipelines_dir, "status", "--json")
    listed = json.loads(out)["overview"]["pipelines"]
    assert [(p["name"], p["has_file"], p["awaiting"]) for p in listed] == [
        ("news", True, 0),
        ("old-digest", False, 1),
    ]
