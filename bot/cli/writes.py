"""The CLI's write commands: each runs exactly once, through the running bot's control
socket, or (when no bot runs) holding the store's writer lock for the command."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

from bot import settings as settings_mod
from bot.cli import output as cli_output
from bot.process import control
from pipelines import operations
from store import db, errors, units
from store.backends import datadir
from store.ledger import budgets

T = TypeVar("T")


class Refused(errors.Refused):
    """A write cannot run safely now; the message says why and what to do."""


def writer_pid(cfg: settings_mod.Settings) -> int | None:
    return datadir.is_locked(cfg.data_dir) if cfg.data_dir.is_dir() else None


def write(
    cfg: settings_mod.Settings,
    op: str,
    request: dict[str, Any],
    local: Callable[[db.Store], Awaitable[Any]],
) -> Any:
    """Run a write exactly once: through the bot's control socket, or holding the lock."""
    pid = writer_pid(cfg)
    if pid is None:
        try:
            return asyncio.run(_as_writer(cfg, local))
        except errors.LockHeld as exc:  # the bot started in between
            pid = exc.pid or -1
    try:
        result = control.request(cfg.data_dir, op, request)
    except control.Unavailable as exc:
        who = f"pid {pid}" if pid > 0 else "another process"
        raise Refused(
            f"the store is held by {who} and its control socket does not answer ({exc}); "
            "nothing was written. If that is the bot, wait for it to finish starting and "
            "retry; otherwise stop that process and run the command again."
        ) from None
    cli_output.progress(f"done through the running bot (pid {pid})")
    return result


async def _as_writer(cfg: settings_mod.Settings, local: Callable[[db.Store], Awaitable[T]]) -> T:
    store = await db.open(settings_mod.store_config(cfg))
    try:
        return await local(store)
    finally:
        await store.close()


def cmd_replay(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    request = {"item": args.item, "force": args.force, "fresh": args.fresh}
    result = write(
        cfg,
        "replay",
        request,
        lambda s: operations.replay(
            s, args.item, control.ACTOR, now, force=args.force, fresh=args.fresh
        ),
    )
    data = operations.plain(result)
    cli_output.emit(
        args, data, lambda: f"item {data['id']} replayed: attempt {data['attempt']}, now new"
    )
    return 0


def cmd_set_budget(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    budgets.check_scope(args.scope)
    operations.parse_usd(args.amount)  # a bad amount never reaches the bot
    request = {"scope": args.scope, "period": args.period, "amount": args.amount}
    result = write(
        cfg,
        "set-budget",
        request,
        lambda s: operations.set_budget(
            s, args.scope, args.period, args.amount, control.ACTOR, now
        ),
    )
    data = operations.plain(result)
    cli_output.emit(args, data, lambda: cli_output.budget_set(_budget(data)))
    return 0


def cmd_reconcile_claim(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    operations.parse_usd(args.amount)
    request = {"claim": args.claim, "amount": args.amount, "evidence": args.evidence}
    result = write(
        cfg,
        "reconcile-claim",
        request,
        lambda s: operations.reconcile_claim(
            s, args.claim, args.amount, args.evidence, control.ACTOR, now
        ),
    )
    data = operations.plain(result)
    claim = data["claim"]
    text = f"claim {claim['id']} settled at {units.usd(claim['actual_micros'])}"
    cli_output.emit(
        args, data, lambda: text + (" (already settled so)" if data["replayed"] else "")
    )
    return 0


def _budget(data: dict[str, Any]) -> budgets.Budget:
    return budgets.Budget(
        data["scope"], data["period"], datetime.fromisoformat(data["period_start"]),
        data["limit_micros"], data["spent_micros"], data["held_micros"],
    )  # fmt: skip


def cmd_schedule(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    action = {"run-now": "run"}.get(args.command, args.command)

    def local(store: db.Store) -> Awaitable[bool]:
        # No bot runs: the pipeline files say which names exist. A running bot checks
        # the name against the pipelines it has loaded.
        known = settings_mod.declared_pipelines(cfg)
        return operations.schedule(store, known, action, args.pipeline, control.ACTOR, now)

    changed = write(cfg, action, {"pipeline": args.pipeline}, local)
    words = {"run": "run requested", "pause": "paused", "resume": "resumed"}
    text = words[action] if changed else f"already {'paused' if action == 'pause' else 'active'}"
    cli_output.emit(
        args, {"pipeline": args.pipeline, "changed": changed}, lambda: f"{args.pipeline}: {text}"
    )
    return 0


def cmd_sweep(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    def step(pipeline: str, scope: str, total: int) -> None:
        cli_output.progress(f"sweep: {pipeline}/{scope}: {total} deleted so far")

    deleted = write(
        cfg,
        "sweep",
        {"days": args.days},
        lambda s: operations.sweep(s, now, args.days, progress=step),
    )
    text = f"forgot {deleted} seen ids older than {args.days} days"
    cli_output.emit(args, {"deleted": deleted}, lambda: text)
    return 0
