"""`gatehouse check [--online]`: settings, pipeline files, secrets and what each pipeline
will need, checked before anything runs (exit 1 on a problem; warnings leave it 0)."""

from __future__ import annotations

import argparse
import asyncio
from datetime import datetime
from typing import TYPE_CHECKING

from bot import settings as settings_mod
from bot.cli import output as cli_output
from bot.cli import reads as cli_reads
from store import errors
from store.backends import datadir
from store.ledger import budgets

if TYPE_CHECKING:
    from pipelines.config import spec
    from pipelines.operations import preflight


def check(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    from bot.process import startup
    from pipelines.approval import quorum
    from pipelines.config import schedules, spec
    from pipelines.operations import preflight

    # The schedules file first: a pipeline naming a broken schedule repeats its errors.
    problems = [str(e) for e in schedules.check(cfg.pipelines_dir)]
    problems += [str(e) for e in spec.check(cfg.pipelines_dir, settings_mod.pipeline_context(cfg))]
    try:
        startup.check(cfg)
    except startup.StartupRefused as exc:
        problems.append(f"settings: {exc}")
    if cfg.data_dir.exists():
        try:
            datadir.prepare(cfg.data_dir)
        except errors.DataDirError as exc:
            problems.append(f"settings: {exc}")
    found = cli_reads.pipelines(cfg)
    needs = _preflight_needs(cfg, found)
    problems += [str(finding) for finding in preflight.offline(found, needs)]
    answers = asyncio.run(_online(found, needs)) if args.online else []
    failed = [str(answer) for answer in answers if not answer.ok]
    loaded = sorted(found)
    # Warnings leave the exit code alone: the bot runs, but an operator should know.
    warnings = [
        f"{name}: {w}" for name in loaded if (w := quorum.after_any_edit(found[name].approval))
    ]
    warnings += [f"{name}: {schedules.NOT_YET}" for name in loaded if found[name].publish]
    value = {
        "ok": not (problems or failed),
        "problems": problems + failed,
        "warnings": warnings,
        "pipelines": loaded,
        "online": [{"part": str(a), "ok": a.ok} for a in answers],
    }
    summary = f"ok: {len(loaded)} pipeline(s): {', '.join(loaded)}"
    if not loaded and not problems:
        # Not a failure (a new directory is empty until its first pipeline is written),
        # but "ok: 0 pipeline(s)" read as if something had been checked.
        summary = (
            f"ok: the settings; no pipeline file (.yaml, .yml) was found in "
            f"{cfg.pipelines_dir.absolute()}: nothing will run until one is written there "
            "(docs/pipelines.md), or GATEHOUSE_PIPELINES_DIR names the directory that holds yours"
        )
    checked = [f"{'ok' if a.ok else 'FAILED'}  {a}" for a in answers]
    warned = [f"warning: {w}" for w in warnings]
    text = "\n".join([*checked, *problems, *warned, *([] if problems or failed else [summary])])
    cli_output.emit(args, value, lambda: text)
    return 1 if problems or failed else 0


def _preflight_needs(
    cfg: settings_mod.Settings, found: dict[str, spec.Pipeline]
) -> preflight.Needs:
    """What the bot would run with, including the budgets already set in the store."""
    scopes = ["global", *found]
    limits: list[tuple[str, budgets.Period]] = []
    if (cfg.data_dir / datadir.DB_NAME).exists():
        limits = cli_reads.read(cfg, lambda s: s.read(budgets.configured_sync, scopes))
    from pipelines.operations import preflight

    return preflight.Needs(
        llm=cfg.llm,
        prices=cfg.prices,
        budget_scopes=frozenset(scope for scope, _ in limits),
        telegram_base_url=cfg.telegram.base_url,
        telegram_token=cfg.telegram.token,
    )


async def _online(
    found: dict[str, spec.Pipeline], needs: preflight.Needs
) -> list[preflight.Finding]:
    from pipelines.ground import httpclient
    from pipelines.operations import preflight

    async with httpclient.new() as client:
        return await preflight.online(found, needs, client)
