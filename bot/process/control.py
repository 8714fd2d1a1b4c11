"""The running bot's control socket: how CLI write commands reach the one writer.

    RuntimeConfig(..., workers=(control.serve,))      # the bot serves it beside the engine
    result = control.request(data_dir, "set-budget",  # the CLI, while the bot runs
                             {"scope": "global", "period": "day", "amount": "5"})

A Unix socket `control.sock` in the private data directory (0700), itself 0600, and
each peer's uid checked against ours. One JSON request line, one JSON response line:
{"op": ..., "args": {...}} -> {"ok": true, "result": ...} or {"ok": false, "error": ...,
"kind": ...}. Every write made through it is attributed to the actor "cli", and a
decision (approve, reject, edit, redraft) to the Unix user of the peer ("cli:<user>");
the operation runs through pipelines.operations, the same functions the Telegram
handlers call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import pwd
import re
import socket
import struct
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.chat import people
from bot.ground import logs
from pipelines import operations
from pipelines.operations import review
from pipelines.providers import pace
from pipelines.service import seams
from pipelines.text import validation
from store import db, errors, ledger
from store.audit import events
from store.intake import tokens
from store.ledger import prices

if TYPE_CHECKING:  # a type only: the CLI loads this module without the engine
    from pipelines.service.scheduler import Scheduler

log = logging.getLogger(__name__)

SOCKET_NAME = "control.sock"
ACTOR = "cli"
#: The argument the server sets to the peer's actor ("cli:<unix user>"); a client's own
#: value is replaced, so a request cannot name someone else.
BY = "by"
#: The longest request line accepted (bytes); requests are a few short arguments.
MAX_LINE = 64 * 1024
#: How long a connection may take to send its request line (seconds); then it is answered
#: with an error and closed, so idle connections never pile up.
READ_TIMEOUT_S = 10.0
#: After an over-long line, how much more is read and dropped (bytes) so that the client,
#: still sending, gets to read the error instead of a reset connection.
MAX_DISCARD = 4 * 1024 * 1024
#: How long the client waits for an answer (seconds); a sweep of millions of rows is slow.
CLIENT_TIMEOUT_S = 600.0
#: sun_path holds 108 bytes with its terminating NUL on Linux.
MAX_SOCKET_PATH = 107

Handler = Callable[[seams.Controlled, dict[str, Any]], Awaitable[Any]]
#: A worker's last error may quote a URL: token-shaped text never leaves the process.
_redact = logs.RedactTokens().redact


class Unavailable(Exception):
    """Nothing answers on the control socket."""


class NoAnswer(Exception):
    """The request was sent but no answer came back: it may or may not have taken effect."""


class Refused(errors.Refused):
    """The bot answered and refused the request; the message says why."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


# -- operations -----------------------------------------------------------------------------


async def _set_budget(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    return await operations.set_budget(
        rt.store, str(args["scope"]), str(args["period"]), str(args["amount"]), ACTOR, rt.now()
    )


async def _replay(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    item = operations.whole_number(args.get("item"), "item")
    force, fresh = bool(args.get("force")), bool(args.get("fresh"))
    asked = operations.Replay(item, ACTOR, force=force, fresh=fresh)
    return await operations.replay(rt.store, asked, rt.now(), scheduler=rt.scheduler)


def _schedule(action: str) -> Handler:
    async def run(rt: seams.Controlled, args: dict[str, Any]) -> Any:
        # A pipeline whose file failed to load is named with its errors, not as unknown.
        name = operations.check_pipeline(str(args["pipeline"]), rt.pipelines, rt.loaded.broken)
        asked = operations.Scheduling(action, name, ACTOR)
        return await operations.schedule(
            rt.store, rt.pipelines, asked, rt.now(), scheduler=rt.scheduler
        )

    return run


async def _reconcile_claim(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    claim = operations.whole_number(args.get("claim"), "claim")
    amount, evidence = str(args["amount"]), str(args["evidence"])
    return await operations.reconcile_claim(rt.store, claim, amount, evidence, ACTOR, rt.now())


async def _settle_uncertain(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    before = args.get("before")
    return await operations.settle_uncertain(
        rt.store,
        str(args.get("at")),
        str(args.get("evidence") or ""),
        ACTOR,
        rt.now(),
        pipeline=args.get("pipeline") and str(args["pipeline"]),
        before=datetime.fromisoformat(str(before)) if before else None,
    )


async def _sweep(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    days = operations.whole_number(args.get("days"), "days", high=operations.MAX_SWEEP_DAYS)
    return await operations.sweep(rt.store, rt.now(), days)


async def decide_in_words(
    store: db.Store,
    pipelines: Mapping[str, Any],
    typed: review.Typed,
    now: datetime,
    scheduler: Scheduler | None = None,
) -> review.Decided:
    """review.at_terminal, its words naming people as the bot does: the one way the CLI
    decides, through this socket or holding the store itself."""
    decided = await review.at_terminal(store, pipelines, typed, now, scheduler=scheduler)
    return dataclasses.replace(decided, said=await people.humanize(store, decided.said))


def _decision(action: str) -> Handler:
    async def run(rt: seams.Controlled, args: dict[str, Any]) -> Any:
        version = args.get("version")
        typed = review.Typed(
            action,
            operations.whole_number(args.get("item"), "item"),
            str(args[BY]),
            None if version is None else operations.whole_number(version, "version"),
            str(args.get("text") or ""),
        )
        return await decide_in_words(rt.store, rt.pipelines, typed, rt.now(), rt.scheduler)

    return run


async def _ping(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    """The pid, the writer's storage fault, each supervised worker's state and each
    model's pace (what `gatehouse health` and `status` read). The fault lives in this
    process's memory only: a full disk cannot hold it."""
    states = [
        dataclasses.replace(s, error=s.error and _redact(s.error)) for s in rt.workers.snapshot()
    ]
    return {
        "pid": os.getpid(),
        "storage": rt.store.faults.current,
        "workers": states,
        "models": pace.snapshot(),
    }


async def _pipelines(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    """The pipelines this bot has loaded: what CLI reads list and CLI writes accept."""
    return {"names": sorted(rt.pipelines)}


async def _reconcile(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    """File dispatch folders against the store, with the bot's own pipelines and paths."""
    from pipelines.operations import files  # the dispatch models: the CLI loads control too

    return await files.reconcile(
        rt.store, rt.pipelines, backfill=bool(args.get("backfill")), prune=bool(args.get("prune"))
    )


async def _record_spend(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    """A dry run's LLM spend, counted against this bot's budgets (`gatehouse dry-run --llm`)."""
    usage = prices.Usage(
        operations.whole_number(args.get("input_tokens"), "input_tokens", low=0),
        operations.whole_number(args.get("output_tokens"), "output_tokens", low=0),
    )
    micros = operations.whole_number(args.get("micros"), "micros", low=0)
    key, pipeline, evidence = str(args["key"]), str(args["pipeline"]), str(args["evidence"])
    spent = ledger.Actual(micros, evidence, usage)
    return await ledger.charge(rt.store, key, pipeline, spent, rt.now())


async def _token_create(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    """Only the token's hash comes here: the CLI made the token and keeps it."""
    return await tokens.create(rt.store, str(args["name"]), str(args["hash"]), ACTOR, rt.now())


async def _token_revoke(rt: seams.Controlled, args: dict[str, Any]) -> Any:
    return await tokens.revoke(rt.store, str(args["name"]), ACTOR, rt.now())


OPS: dict[str, Handler] = {
    "ping": _ping,
    "pipelines": _pipelines,
    "reconcile": _reconcile,
    "record-spend": _record_spend,
    "set-budget": _set_budget,
    "replay": _replay,
    "run": _schedule("run"),
    "pause": _schedule("pause"),
    "resume": _schedule("resume"),
    "sweep": _sweep,
    "reconcile-claim": _reconcile_claim,
    "settle-uncertain": _settle_uncertain,
    "token-create": _token_create,
    "token-revoke": _token_revoke,
    **{action: _decision(action) for action in review.TERMINAL_ACTIONS},
}


# -- server ---------------------------------------------------------------------------------


async def serve(runtime: seams.Controlled, stop: asyncio.Event) -> None:
    """Answer control requests until `stop` is set (a RuntimeConfig worker)."""
    path = socket_path(runtime.store.config.data_dir)
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        log.error("control socket path %s is too long for a Unix socket; CLI writes refuse", path)
        return
    # A socket left by a crash: this process holds the writer lock, so nobody else uses it.
    path.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(
        lambda r, w: _connection(runtime, r, w), path=str(path), limit=MAX_LINE
    )
    os.chmod(path, 0o600)
    log.info("control socket listening at %s", path)
    try:
        await stop.wait()
    finally:
        server.close()
        await server.wait_closed()
        path.unlink(missing_ok=True)


def _peer_uid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


async def _connection(
    runtime: seams.Controlled, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        uid = _peer_uid(writer)
        # Read the line even from a stranger (bounded as any other), so the refusal reaches
        # a client still sending instead of a reset connection.
        line = await _request_line(reader)
        if uid is not None and uid != os.geteuid():
            log.warning("control: refused a connection from uid %d", uid)
            answer = _error(f"uid {uid} may not control this bot", "forbidden")
        else:
            by = events.cli(unix_user(os.geteuid() if uid is None else uid))
            with db.foreground():  # someone waits at a terminal: ahead of a tick's writes
                answer = line if isinstance(line, dict) else await _answer(runtime, line, by)
        writer.write(json.dumps(answer).encode() + b"\n")
        await writer.drain()
    except ConnectionError as exc:
        log.warning("control connection dropped: %s", exc)
    finally:
        writer.close()


async def _request_line(reader: asyncio.StreamReader) -> bytes | dict[str, Any]:
    """The request line, or the error answer for a silent or over-long one."""
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            return await reader.readline()
    except TimeoutError:
        return _error(f"no request line within {READ_TIMEOUT_S:g} s", "invalid")
    except ValueError:  # StreamReader's way of saying the line passed its limit
        await _discard(reader)
        return _error(
            f"request line longer than {MAX_LINE} bytes; valid ops: {', '.join(OPS)}", "invalid"
        )


async def _discard(reader: asyncio.StreamReader) -> None:
    # Bounded in bytes and time: a client that never stops sending is cut off regardless.
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(READ_TIMEOUT_S):
            dropped = 0
            while dropped < MAX_DISCARD:
                chunk = await reader.read(64 * 1024)
                if not chunk or b"\n" in chunk:
                    return
                dropped += len(chunk)


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"ok": False, "error": message, "kind": kind}


def unix_user(uid: int) -> str:
    """The user name of `uid` as an actor may spell it (else "uid<n>")."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64]
    return cleaned or f"uid{uid}"


async def _answer(runtime: seams.Controlled, line: bytes, by: str) -> dict[str, Any]:
    try:
        request = json.loads(line)
        op, args = request["op"], request.get("args") or {}
        handler = OPS[op]
        if not isinstance(args, dict):
            raise TypeError("args must be an object")
        args = {**args, BY: by}
    except (ValueError, KeyError, TypeError, AttributeError):
        return _error(f"bad request; valid ops: {', '.join(OPS)}", "invalid")
    try:
        result = await handler(runtime, args)
    except (operations.Invalid, validation.InvalidDraft) as exc:
        return _error(str(exc), "invalid")
    except errors.Refused as exc:
        return _error(str(exc), "refused")
    except (KeyError, TypeError, ValueError) as exc:
        return _error(f"bad arguments for {op}: {exc}", "invalid")
    except errors.StoreError as exc:
        return _error(str(exc), "store")
    except Exception:
        log.exception("control op %s failed", op)
        return _error(f"{op} failed inside the bot; see its log", "internal")
    log.info("control: %s by %s", op, by if op in review.TERMINAL_ACTIONS else ACTOR)
    return {"ok": True, "result": operations.plain(result)}


# -- client ---------------------------------------------------------------------------------


def request(
    data_dir: Path, op: str, args: dict[str, Any], timeout: float = CLIENT_TIMEOUT_S
) -> Any:
    """Send one request to the running bot; its result, or Refused / Unavailable."""
    path = socket_path(data_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except OSError as exc:
            raise Unavailable(f"nothing answers at {path} ({exc.strerror or exc})") from None
        try:
            sock.sendall(json.dumps({"op": op, "args": args}).encode() + b"\n")
            with sock.makefile("rb") as stream:
                line = stream.readline(MAX_LINE * 16)
        except OSError as exc:
            raise NoAnswer(f"{op}: no answer from the bot ({exc}); check its effect") from None
    if not line:
        raise NoAnswer(f"{op}: the bot closed {path} without an answer; check its effect")
    answer = json.loads(line)
    if not answer.get("ok"):
        raise Refused(str(answer.get("error")), str(answer.get("kind")))
    return answer.get("result")
