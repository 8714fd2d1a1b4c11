"""The CLI's read commands: a read-only store (never the lock), safe beside the bot.

    gatehouse status|runs|pending|history|budget|audit|backup|reconcile|health

`read(cfg, fn)` opens the store read-only for one call; the other CLI modules use it too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from bot import settings as settings_mod
from bot.chat import cluster, people
from bot.cli import audit as cli_audit
from bot.cli import output as cli_output
from bot.cli import writes as cli_writes
from bot.ground import storage_alarm
from bot.process import control
from pipelines import operations
from pipelines.providers import pace
from pipelines.service import workers as workers_mod
from store import db
from store.backends import backup, datadir, writer
from store.reports import info

if TYPE_CHECKING:
    from pipelines.config import spec

T = TypeVar("T")
#: How long health and status wait for the running bot's answer (seconds).
PING_TIMEOUT_S = 3.0


def pipelines(cfg: settings_mod.Settings) -> dict[str, spec.Pipeline]:
    """The pipeline files as they are on disk (what `check` and `dry-run` try)."""
    return loaded(cfg).pipelines


def loaded(cfg: settings_mod.Settings) -> spec.LoadResult:
    """The pipeline files as they are on disk, with the files that failed and why."""
    from pipelines.config import spec

    return spec.load_dir(cfg.pipelines_dir, settings_mod.pipeline_context(cfg))


def known_pipeline(cfg: settings_mod.Settings, name: str) -> str:
    """`name` if the running bot (or, with none, the files) knows it; else Invalid with
    close matches, or with the errors of its file when it failed to load."""
    known = pipeline_names(cfg)
    if name in known:
        return name
    # Read the files only now: a file that failed to load is named with its errors.
    return operations.check_pipeline(name, known, loaded(cfg).broken)


def pipeline_names(cfg: settings_mod.Settings) -> list[str]:
    """The pipelines the running bot has loaded, asked over its control socket, so the
    CLI never disagrees with it; with no bot running, the names the files declare."""
    if cli_writes.writer_pid(cfg):
        try:
            answer = control.request(cfg.data_dir, "pipelines", {}, timeout=PING_TIMEOUT_S)
        except (control.Unavailable, control.NoAnswer, control.Refused):
            pass  # still starting: the files say what it will load
        else:
            return [str(name) for name in answer["names"]]
    return settings_mod.declared_pipelines(cfg)


# -- reads: a read-only store, never the lock ---------------------------------------------


def read(cfg: settings_mod.Settings, fn: Callable[[db.Store], Awaitable[T]]) -> T:
    async def go() -> T:
        store = await db.open(settings_mod.store_config(cfg), readonly=True)
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


def cmd_status(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    if args.pipeline:
        return cmd_runs(cfg, args, now)
    names = pipeline_names(cfg)

    ttl = timedelta(seconds=cfg.cluster.lease_ttl_s)

    async def fn(store: db.Store) -> tuple[operations.Overview, info.Info, cluster.Cluster]:
        found = await cluster.read(store, now, ttl)
        return await operations.overview(store, names, now), await info.info(store), found

    overview, summary, workers = read(cfg, fn)
    pid = cli_writes.writer_pid(cfg)
    if pid:
        storage, models = _bot_state(cfg)
        overview = dataclasses.replace(overview, storage=storage, models=models)
    value = {"overview": overview, "store": summary, "writer_pid": pid, "cluster": workers}
    verbose = getattr(args, "verbose", False)

    def text() -> str:
        status = cli_output.status(overview, summary, pid, now, verbose)
        return "\n".join([status, *cluster.lines(workers)])

    cli_output.emit(args, value, text)
    return 0


def cmd_runs(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    names = [known_pipeline(cfg, args.pipeline)] if args.pipeline else pipeline_names(cfg)
    limit = getattr(args, "limit", operations.RUNS_SHOWN)

    async def fn(store: db.Store) -> list[operations.PipelineRuns]:
        return [await operations.pipeline_runs(store, name, now, limit) for name in names]

    found = read(cfg, fn)
    cli_output.emit(
        args, found, lambda: "\n\n".join(cli_output.pipeline_runs(f, now) for f in found)
    )
    return 0


def cmd_pending(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    waiting = read(cfg, operations.pending)
    cli_output.emit(args, waiting, lambda: cli_output.pending(waiting, now))
    return 0


def cmd_filtered(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    known_pipeline(cfg, args.pipeline)
    found = read(cfg, lambda store: operations.filtered(store, args.pipeline, args.limit))
    cli_output.emit(args, found, lambda: cli_output.filtered(args.pipeline, found, now))
    return 0


def cmd_skipped(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    known_pipeline(cfg, args.pipeline)
    found = read(cfg, lambda store: operations.skipped(store, args.pipeline, args.limit))
    cli_output.emit(args, found, lambda: cli_output.skipped(args.pipeline, found, now))
    return 0


def cmd_stats(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    if args.pipeline is None:
        names = sorted(pipeline_names(cfg))
    else:
        names = [known_pipeline(cfg, args.pipeline)]
    found = read(cfg, lambda store: operations.stats(store, names, args.days, now))
    cli_output.emit(args, found, lambda: cli_output.stats(found, args.days))
    return 0


def cmd_history(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    async def fn(store: db.Store) -> tuple[operations.History, dict[int, str]]:
        found = await operations.history(store, args.item)
        said = " ".join(f"{e.actor} {e.reason or ''}" for e in found.events) + str(
            found.item.reason
        )
        return found, await people.labels(store, people.ids_in(said))

    found, names = read(cfg, fn)
    cli_output.emit(args, found, lambda: cli_output.history(found, names))
    return 0


def cmd_budget(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    report = read(cfg, lambda store: operations.budget(store, now))
    cli_output.emit(args, report, lambda: cli_output.budget(report, now))
    return 0


def cmd_audit(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    return cli_audit.run(cfg, args, read)


def cmd_backup(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    shown = [-1]

    def step(done: int, total: int) -> None:
        pct = 100 * done // max(total, 1)
        if pct != shown[0]:
            shown[0] = pct
            cli_output.progress(f"backup: {pct}% ({done}/{total} pages)")

    result = read(cfg, lambda store: backup.backup(store, args.path, step))
    cli_output.emit(args, result, lambda: cli_output.backup(result))
    return 0


def cmd_reconcile(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    # Only files change, never the store. While the bot runs it compares its own
    # pipelines and paths (through the control socket); otherwise the files here.
    answer = None
    if cli_writes.writer_pid(cfg):
        request = {"backfill": args.backfill, "prune": args.prune}
        with contextlib.suppress(control.Unavailable):  # not a bot: the files here
            answer = control.request(cfg.data_dir, "reconcile", request)
    from pipelines.operations import files  # the dispatch models: this command alone

    if answer is not None:
        reports = [files.FolderReport.from_plain(found) for found in answer]
    else:
        known = pipelines(cfg)
        reports = read(
            cfg,
            lambda store: files.reconcile(
                store, known, backfill=args.backfill, prune=args.prune, progress=cli_output.progress
            ),
        )
    cli_output.emit(args, reports, lambda: cli_output.reconcile(reports))
    unresolved = any(
        set(r.ghosts) - set(r.backfilled) or len(r.orphans) > len(r.pruned) for r in reports
    )
    return 1 if unresolved else 0


def _storage(answer: dict[str, object]) -> writer.StorageFault | None:
    """The running bot's storage fault from its ping answer (kept in its memory only:
    a full disk could not hold it in a file, let alone in the store)."""
    found = answer.get("storage")
    if not isinstance(found, dict):
        return None
    since = datetime.fromisoformat(str(found["since"]))
    return writer.StorageFault(found["kind"], str(found["detail"]), since)


def _bot_state(
    cfg: settings_mod.Settings,
) -> tuple[writer.StorageFault | None, list[pace.Snapshot]]:
    """The running bot's storage fault and each model's pace, from its ping answer."""
    try:
        answer = control.request(cfg.data_dir, "ping", {}, timeout=PING_TIMEOUT_S)
    except (control.Unavailable, control.NoAnswer, control.Refused):
        return None, []  # status still shows what the store holds; health says what is wrong
    return _storage(answer), _models(answer.get("models"))


def _models(found: object) -> list[pace.Snapshot]:
    """Each model's pace as the bot's ping said it (nothing from a bot of another version)."""
    try:
        return [pace.Snapshot(**m) for m in found] if isinstance(found, list) else []
    except TypeError:
        return []


def cmd_health(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    """Exit 0 while a gatehouse process holds the store, answers on its control socket,
    can write, and reports every supervised worker running (the states live in that
    process: ping asks); otherwise exit 1 and say which of these fails."""
    pid = datadir.is_locked(cfg.data_dir) if cfg.data_dir.exists() else None
    problem = None if pid else f"no gatehouse process holds the store in {cfg.data_dir}"
    down: list[dict[str, Any]] = []
    if pid:
        try:
            answer = control.request(cfg.data_dir, "ping", {}, timeout=PING_TIMEOUT_S)
        except (control.Unavailable, control.NoAnswer, control.Refused) as exc:
            problem = f"process {pid} holds the store but does not answer: {exc}"
        else:
            fault = _storage(answer)
            down = [w for w in answer.get("workers", []) if not workers_mod.is_up(w.get("status"))]
            if fault is not None:
                problem = f"process {pid} runs, but {storage_alarm.describe(fault)}"
            elif down:
                problem = "workers not running: " + "; ".join(
                    f"{w['name']} {w['status']} ({w.get('error') or 'no error'})" for w in down
                )
    value = {"ok": problem is None, "pid": pid, "problem": problem, "workers_down": down}
    cli_output.emit(args, value, lambda: problem or f"ok: gatehouse runs as pid {pid}")
    return 1 if problem else 0
