"""The CLI's write commands: each runs exactly once, through the running bot's control
socket, or (when no bot runs) holding the store's writer lock for the command."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from bot import settings as settings_mod
from bot.cli import output as cli_output
from bot.process import control
from pipelines import operations
from store import db, errors, units
from store.backends import datadir
from store.ledger import budgets
from store.ledger import uncertain as ledger_uncertain

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
    asked = operations.Replay(args.item, control.ACTOR, force=args.force, fresh=args.fresh)
    result = write(cfg, "replay", request, lambda s: operations.replay(s, asked, now))
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


def add_uncertain_arguments(parser: argparse.ArgumentParser) -> None:
    """reconcile-claim's bulk form: every uncertain claim found, settled in one transaction."""
    parser.add_argument(
        "--uncertain",
        action="store_true",
        help="settle every uncertain claim found (filtered by --pipeline and --before)",
    )
    parser.add_argument("--pipeline", help="with --uncertain: only this pipeline's claims")
    parser.add_argument(
        "--before",
        type=moment,
        help="with --uncertain: only claims uncertain since before this ISO 8601 time "
        "(2026-12-07T06:15; without a zone: UTC)",
    )
    parser.add_argument(
        "--at",
        choices=ledger_uncertain.AT,
        help="with --uncertain: zero (not charged) or reserve (charged what each held)",
    )
    parser.add_argument(
        "--evidence",
        dest="bulk_evidence",
        metavar="TEXT",
        help="with --uncertain: what you checked (the provider's console, an invoice)",
    )


def moment(text: str) -> datetime:
    """An ISO 8601 time; one without a zone is UTC, as everything the store shows."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time; give one like 2026-12-07T06:15 (UTC)"
        ) from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def cmd_reconcile_claim(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    if args.uncertain:
        return _settle_uncertain(cfg, args, now)
    if args.claim is None or args.amount is None or args.evidence is None:
        raise operations.Invalid(
            "reconcile-claim needs <claim> <usd> <evidence>, or --uncertain --at zero|reserve "
            "--evidence TEXT to settle every uncertain claim at once"
        )
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


def _settle_uncertain(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    if args.claim is not None or args.amount is not None:
        raise operations.Invalid(
            "--uncertain settles the claims it finds: give no claim id or amount "
            "(filter with --pipeline and --before)"
        )
    if args.at is None or not (args.bulk_evidence or "").strip():
        raise operations.Invalid(
            "--uncertain needs --at zero|reserve and --evidence TEXT (what you checked)"
        )
    before = args.before.isoformat() if args.before else None
    request = {
        "at": args.at,
        "evidence": args.bulk_evidence,
        "pipeline": args.pipeline,
        "before": before,
    }
    result = write(
        cfg,
        "settle-uncertain",
        request,
        lambda s: operations.settle_uncertain(
            s,
            args.at,
            args.bulk_evidence,
            control.ACTOR,
            now,
            pipeline=args.pipeline,
            before=args.before,
        ),
    )
    data = operations.plain(result)
    cli_output.emit(args, data, lambda: settled_text(data))
    return 0


def settled_text(data: dict[str, Any]) -> str:
    """Each claim settled, with its item and figures, then the total."""
    done = [s["claim"] for s in data["settled"]]
    if not done:
        return "no uncertain claims match: nothing settled"
    lines = [
        f"claim {c['id']} · {c['pipeline']} "
        + (f"item {c['item_id']}" if c["item_id"] is not None else "no item")
        + f" · settled at {units.usd(c['actual_micros'])} of {units.usd(c['reserved_micros'])} held"
        for c in done
    ]
    total = sum(c["actual_micros"] for c in done)
    lines.append(
        f"{len(done)} uncertain claim(s) settled at {units.usd(total)} in one transaction; "
        "their items go on at the next run"
    )
    return "\n".join(lines)


def _budget(data: dict[str, Any]) -> budgets.Budget:
    return budgets.Budget(
        data["scope"],
        data["period"],
        datetime.fromisoformat(data["period_start"]),
        data["limit_micros"],
        data["spent_micros"],
        data["held_micros"],
    )


def cmd_schedule(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    action = {"run-now": "run"}.get(args.command, args.command)

    def local(store: db.Store) -> Awaitable[bool]:
        # No bot runs: the pipeline files say which names exist. A running bot checks
        # the name against the pipelines it has loaded.
        known = settings_mod.declared_pipelines(cfg)
        asked = operations.Scheduling(action, args.pipeline, control.ACTOR)
        return operations.schedule(store, known, asked, now)

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
