"""The control socket as clients meet it: a real Unix socket served by a real runtime.

Every refusal is answered with a reason, and leaves the store as it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.process import control
from pipelines import operations
from pipelines.service import runtime as runtime_mod
from store import db, items
from store.audit import events
from store.items.machine import State
from store.reports import info
from tests import running

PIPELINE = """\
name: news
schedule: manual
sources:
  - type: folder
    path: {notes}
dispatch:
  type: none
"""
NOBODY = 65534


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A data directory directly under /tmp: short enough for a socket path, and reachable
    by another uid once its mode is loosened (pytest's own tmp_path is not)."""
    with tempfile.TemporaryDirectory(prefix="gh-", dir="/tmp") as name:
        data_dir = Path(name) / "data"
        data_dir.mkdir(mode=0o700)
        yield data_dir


@pytest.fixture
async def runtime(short_dir: Path, tmp_path: Path) -> AsyncIterator[runtime_mod.Runtime]:
    (tmp_path / "notes").mkdir()
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "news.yaml").write_text(PIPELINE.format(notes=tmp_path / "notes"))
    async with running.with_control(short_dir, pipelines) as started:
        yield started


async def snapshot(store: db.Store, item_id: int) -> tuple[Any, ...]:
    """What a refused request must leave alone: the item, its events, every table's rows."""
    item = await items.get(store, item_id)
    summary = await info.info(store)
    trail = await events.for_entity(store, "item", str(item_id))
    return (item.state, item.attempt, item.version, dict(summary.rows), len(trail))


async def dropped_item(store: db.Store, now: datetime) -> items.Item:
    item = await store.write(items.create_sync, "news", "notes", "a.md", {"title": "A note"}, now)
    assert item is not None
    return await store.write(
        items.transition_sync, item.id, State.FAILED, "system", now, reason="boom"
    )


async def raw_exchange(path: Path, payload: bytes) -> dict[str, Any]:
    """Send `payload` as is and read the one answer line."""
    reader, writer = await asyncio.open_unix_connection(str(path), limit=2**20)
    writer.write(payload)
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 10)
    writer.close()
    answer: dict[str, Any] = json.loads(line)
    return answer


async def test_bad_requests_get_a_reason_and_change_nothing(
    runtime: runtime_mod.Runtime, short_dir: Path, now: datetime
) -> None:
    item = await dropped_item(runtime.store, now - timedelta(minutes=5))
    before = await snapshot(runtime.store, item.id)
    path = control.socket_path(short_dir)
    valid = ", ".join(control.OPS)
    cases: list[tuple[bytes, str, str]] = [
        (b"not json\n", "invalid", f"bad request; valid ops: {valid}"),
        (b'{"op": "explode"}\n', "invalid", f"bad request; valid ops: {valid}"),
        (b'["replay"]\n', "invalid", f"bad request; valid ops: {valid}"),
        (b'{"op": "replay", "args": [1]}\n', "invalid", f"bad request; valid ops: {valid}"),
        (
            json.dumps({"op": "replay", "args": {"item": 10**30}}).encode() + b"\n",
            "invalid",
            f"item must be a whole number from 1 to {operations.MAX_ID}, not {str(10**30)[:24]}",
        ),
        (
            b'{"op": "replay", "args": {"item": "\xc2\xb2"}}\n',
            "invalid",
            f"item must be a whole number from 1 to {operations.MAX_ID}, not '²'",
        ),
        (
            b'{"op": "replay", "args": {"item": true}}\n',
            "invalid",
            f"item must be a whole number from 1 to {operations.MAX_ID}, not True",
        ),
        (
            b'{"op": "sweep", "args": {"days": 99999999}}\n',
            "invalid",
            f"days must be a whole number from 1 to {operations.MAX_SWEEP_DAYS}, not 99999999",
        ),
        (
            b'{"op": "reconcile-claim", "args": {"claim": -3, "amount": "1", "evidence": "x"}}\n',
            "invalid",
            f"claim must be a whole number from 1 to {operations.MAX_ID}, not -3",
        ),
    ]
    for payload, kind, error in cases:
        answer = await raw_exchange(path, payload)
        assert answer == {"ok": False, "error": error, "kind": kind}, payload
    assert await snapshot(runtime.store, item.id) == before


async def test_an_over_long_line_is_answered_not_dropped(
    runtime: runtime_mod.Runtime, short_dir: Path, now: datetime
) -> None:
    item = await dropped_item(runtime.store, now - timedelta(minutes=5))
    before = await snapshot(runtime.store, item.id)
    huge = "x" * (1024 * 1024)
    # The real client, sending 1 MB: it reads the refusal instead of a reset connection.
    with pytest.raises(control.Refused) as refused:
        await asyncio.to_thread(
            control.request, short_dir, "replay", {"item": item.id, "pad": huge}, 10
        )
    assert refused.value.kind == "invalid"
    assert str(refused.value).startswith(f"request line longer than {control.MAX_LINE} bytes")
    assert await snapshot(runtime.store, item.id) == before
    # The socket still serves afterwards.
    assert (await asyncio.to_thread(control.request, short_dir, "ping", {}, 10))["pid"] > 0


async def test_a_silent_connection_is_answered_and_closed_after_the_read_timeout(
    runtime: runtime_mod.Runtime, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "READ_TIMEOUT_S", 0.3)
    reader, writer = await asyncio.open_unix_connection(str(control.socket_path(short_dir)))
    line = await asyncio.wait_for(reader.readline(), 5)
    assert json.loads(line) == {
        "ok": False,
        "error": "no request line within 0.3 s",
        "kind": "invalid",
    }
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the bot
    writer.close()


CLIENT = """
import json, socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
sock.connect(sys.argv[1])
sock.sendall(json.dumps({"op": "replay", "args": {"item": int(sys.argv[2])}}).encode() + b"\\n")
print(sock.makefile("rb").readline().decode(), end="")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another uid needs root")
async def test_another_uid_is_refused_even_when_the_socket_is_reachable(
    runtime: runtime_mod.Runtime, short_dir: Path, now: datetime
) -> None:
    item = await dropped_item(runtime.store, now - timedelta(minutes=5))
    before = await snapshot(runtime.store, item.id)
    path = control.socket_path(short_dir)
    # Loosen what normally keeps other users out, so the uid check is what refuses.
    for directory in (short_dir.parent, short_dir):
        directory.chmod(0o711)
    path.chmod(0o666)
    proc = await asyncio.create_subprocess_exec(
        "/usr/bin/python3", "-I", "-c", CLIENT, str(path), str(item.id),
        user=NOBODY, group=NOBODY, extra_groups=[],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert json.loads(out) == {
        "ok": False,
        "error": f"uid {NOBODY} may not control this bot",
        "kind": "forbidden",
    }
    assert await snapshot(runtime.store, item.id) == before


async def test_refusals_from_the_operation_say_why_and_change_nothing(
    runtime: runtime_mod.Runtime, short_dir: Path, now: datetime
) -> None:
    item = await runtime.store.write(
        items.create_sync, "news", "notes", "b.md", {"title": "B"}, now
    )
    assert item is not None and item.state == State.NEW  # not dropped: nothing to replay
    before = await snapshot(runtime.store, item.id)
    path = control.socket_path(short_dir)
    not_dropped = await raw_exchange(
        path, json.dumps({"op": "replay", "args": {"item": item.id}}).encode() + b"\n"
    )
    assert not_dropped["kind"] == "refused" and "not dropped" in not_dropped["error"]
    missing = await raw_exchange(path, b'{"op": "replay", "args": {"item": 999}}\n')
    assert missing["kind"] == "refused" and "999" in missing["error"]
    no_scope = await raw_exchange(path, b'{"op": "set-budget", "args": {"period": "day"}}\n')
    assert no_scope == {
        "ok": False,
        "error": "bad arguments for set-budget: 'scope'",
        "kind": "invalid",
    }
    assert await snapshot(runtime.store, item.id) == before


async def test_run_of_a_pipeline_whose_file_failed_names_its_errors(
    short_dir: Path, tmp_path: Path
) -> None:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    (pipelines / "news.yaml").write_text(PIPELINE.format(notes=tmp_path))
    city = pipelines / "city.yaml"
    city.write_text(PIPELINE.format(notes=tmp_path).replace("news", "city") + "nope: 1\n")
    async with running.with_control(short_dir, pipelines):
        path = control.socket_path(short_dir)
        answer = await raw_exchange(path, b'{"op": "run", "args": {"pipeline": "city"}}\n')
    assert answer["kind"] == "invalid", answer
    assert answer["error"].startswith("pipeline 'city' did not load: its file has errors")
    assert f"{city}:8: nope: unknown field 'nope'" in answer["error"]


async def test_the_client_says_when_nothing_answers_or_no_answer_came(tmp_path: Path) -> None:
    with pytest.raises(control.Unavailable, match="nothing answers at"):
        await asyncio.to_thread(control.request, tmp_path, "ping", {}, 5)

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.close()  # the request arrived; the answer never does

    server = await asyncio.start_unix_server(hang_up, path=str(control.socket_path(tmp_path)))
    try:
        with pytest.raises(
            control.NoAnswer, match=r"closed .* without an answer; check its effect"
        ):
            await asyncio.to_thread(control.request, tmp_path, "pause", {"pipeline": "x"}, 5)
    finally:
        server.close()
        await server.wait_closed()
