"""The `gatehouse` command line: run the bot, and inspect or operate it from a terminal.

    gatehouse run                              start the operator bot and the engine
    gatehouse init                             create an empty store in the data directory
    gatehouse demo [--port N] [--data-dir D] [--pipelines DIR]
                                              offline demo in a browser: no token, no API key
    gatehouse check [--online]                 settings, pipeline files, secrets (exit 1 on errors)
    gatehouse dry-run <pipeline> [--limit 5] [--llm]   fetch now, draft the newest 5; print them
    gatehouse voice FILE|- [--pipeline P|--profile F]   a text's tells (exit 1 on a block tell)
    gatehouse health                           exit 0 while the bot and all its workers run
    gatehouse status [pipeline] [--verbose]    every pipeline, or one pipeline's recent runs
    gatehouse runs [pipeline] [--limit 10]     recent runs, with the last green / first red run
    gatehouse pending                          items awaiting approval, oldest first
    gatehouse filtered <pipeline> [--limit 50] entries its filter dropped, with the rule
    gatehouse skipped <pipeline> [--limit 50]  entries its triage skipped, with the reason
    gatehouse stats [pipeline] [--days 7|30]   the editor's numbers per pipeline
    gatehouse history <item>                   one item's events
    gatehouse replay <item> [--force] [--fresh] replay a dropped item (force: a dispatched one)
    gatehouse budget                           spend, holds and limits, today and this month
    gatehouse set-budget <scope> <day|month> <usd>   set a limit (scope: global or a pipeline)
    gatehouse run-now|pause|resume <pipeline>  run a pipeline now, stop or restart its schedule
    gatehouse reconcile-claim <claim> <usd> <evidence>   settle an uncertain AI spend claim
    gatehouse reconcile-claim --uncertain [--pipeline P] [--before TIME] --at zero|reserve
                              --evidence TEXT   settle every uncertain claim found, at once
    gatehouse reconcile [--backfill|--prune]   file dispatch folders against the store
    gatehouse audit verify                     check the hash chain and its signed head (1: broken)
    gatehouse audit export|key                 export events with hashes; print the signing key
    gatehouse audit verify --export F --public-key K   check an export offline
    gatehouse sweep [--days 90]                forget seen ids older than that
    gatehouse backup <path>                    online backup to a new file, then verify it
    gatehouse token create|list|revoke [name]  HTTP trigger tokens (shown once, kept as hashes)
    gatehouse migrate-to-postgres              copy SQLite into GATEHOUSE_DATABASE_URL, verified

Every command takes --env-file FILE (default: .env in the working directory) and
--data-dir DIR (over GATEHOUSE_DATA_DIR); relative paths in settings resolve from the
working directory. Every read command takes --json.
Reads work while the bot runs (read-only connections).
Writes while the bot runs go through its control socket (bot/process/control.py) as actor "cli",
or are refused naming the bot's pid; with no bot running the command holds the store's
writer lock itself for its duration. Progress of long operations goes to stderr.
Every command but run, init, demo, check, dry-run and voice refuses a data directory that
holds no store, naming the path it looked at: a mistyped --data-dir would otherwise
read as an empty store.

Exit codes: 0 ok, 1 a check failed (check, audit verify, reconcile differences, voice),
2 bad usage, bad settings, an unusable data directory, or a refused write.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from bot import settings as settings_mod
from bot.cli import audit as cli_audit
from bot.cli import check as cli_check
from bot.cli import decisions as cli_decisions
from bot.cli import dry_run as cli_dry_run
from bot.cli import output as cli_output
from bot.cli import reads as cli_reads
from bot.cli import tokens as cli_tokens
from bot.cli import voice as cli_voice
from bot.cli import writes as cli_writes
from bot.demo import DEFAULT_PORT as DEMO_PORT
from bot.process import control
from pipelines import operations
from store import db, errors
from store.backends import datadir
from store.ledger import budgets

if TYPE_CHECKING:
    pass

T = TypeVar("T")
#: Errors that mean "fix the setup" or "cannot be done as asked": exit code 2.
USAGE_ERRORS = (*errors.STARTUP_ERRORS, errors.Refused, ValueError, control.NoAnswer)


#: The commands that work without a store: they create one, or never open one.
NEED_NO_STORE = frozenset({"run", "demo", "init", "check", "dry-run", "voice"})


class NoStore(errors.Refused):
    """The data directory holds no store: most likely the wrong path."""


def need_store(cfg: settings_mod.Settings) -> None:
    """Refuse a data directory that is unsafe or holds no store, naming the path."""
    if cfg.database_url is not None:
        return  # PostgreSQL: the server holds the store, the data dir only the lock
    if cfg.data_dir.exists():
        datadir.prepare(cfg.data_dir)  # an unsafe directory says so first
    path = (cfg.data_dir / datadir.DB_NAME).resolve()
    if not path.exists():
        raise NoStore(
            f"no store at {path}. The data directory comes from --data-dir or "
            "GATEHOUSE_DATA_DIR (default: ./data in the working directory). Check the path; "
            "`gatehouse run` or `gatehouse init` creates a store there"
        )


def cmd_init(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    existed = (cfg.data_dir / datadir.DB_NAME).exists()
    if not existed or cfg.database_url:  # PostgreSQL: opening applies what migrations lack
        asyncio.run(_create(cfg))
    if cfg.database_url:  # the lock file tells nothing of the server: say what was done
        where, said, created = "the PostgreSQL database", "ready (migrations applied)", None
    else:
        where = str(cfg.data_dir / datadir.DB_NAME)
        said, created = ("already there" if existed else "created"), not existed
    text = f"store {said}: {where}"
    cli_output.emit(args, {"created": created, "store": where}, lambda: text)
    return 0


async def _create(cfg: settings_mod.Settings) -> None:
    """Open the store as its writer (which creates it and applies the migrations), close."""
    store = await db.open(settings_mod.store_config(cfg))
    await store.close()


def cmd_migrate_to_postgres(
    cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime
) -> int:
    from bot.cli import to_postgres  # the copier: this command alone

    return to_postgres.cmd(cfg, args, now)


def cmd_dry_run(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    return cli_dry_run.run(cfg, args, now, cli_reads.loaded(cfg), cli_reads.read)


# -- arguments ------------------------------------------------------------------------------


def item_id(text: str) -> int:
    try:
        return operations.whole_number(text, "an item id")
    except operations.Invalid as exc:
        raise argparse.ArgumentTypeError(f"{exc}; give a number like 12") from None


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


Command = Callable[[settings_mod.Settings, argparse.Namespace, datetime], int]
PIPELINE_HELP = "the pipeline's name, as `gatehouse status` lists it"


def _data_dir(text: str) -> Path:
    """--data-dir's value: an empty one is a usage error, not the working directory."""
    try:
        return datadir.parse(text)
    except errors.DataDirError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _limit(parser: argparse.ArgumentParser, default: int, shown: str) -> None:
    help_ = shown + " (default: %(default)s)"
    parser.add_argument("--limit", type=positive, default=default, metavar="N", help=help_)


def _config_options(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--env-file",
        type=Path,
        default=default,
        metavar="FILE",
        help="read settings from this file (default: .env in the working directory, if any)",
    )
    parser.add_argument(
        "--data-dir",
        type=_data_dir,
        default=default,
        metavar="DIR",
        help="the data directory, relative to the working directory "
        "(default: GATEHOUSE_DATA_DIR from the environment or the settings file, else data)",
    )


def _parser() -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    parser = argparse.ArgumentParser(
        prog="gatehouse",
        description=__doc__.splitlines()[0],
        epilog=(
            "Exit codes: 0 ok, 1 a check failed, 2 bad usage, settings or data directory. "
            "Documentation: README.md and docs/ (pipelines.md, operations.md, "
            "troubleshooting.md, architecture.md, benchmarks.md) in the gatehouse repository."
        ),
    )
    _config_options(parser, default=None)
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="command",
        help="what to do; `gatehouse COMMAND --help` says more",
    )
    table: dict[str, Command] = {}

    def add(name: str, fn: Command | None, text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=text, description=text)
        if name != "demo":  # the demo has its own data dir and ignores the settings
            # Given after the command, they override the ones given before it.
            _config_options(command, default=argparse.SUPPRESS)
        if fn is not None:
            command.add_argument(
                "--json", action="store_true", help="print JSON for scripts instead of text"
            )
            table[name] = fn
        return command

    add("run", None, "start the operator bot and the engine (same as python -m bot)")
    add("init", cmd_init, "create an empty store in the data directory (run does it too)")
    demo = add("demo", None, "the offline demo in a web chat: no Telegram token, no API key")
    demo.add_argument(
        "--port",
        type=int,
        default=DEMO_PORT,
        metavar="N",
        help="the page's port on 127.0.0.1; 0 picks a free one (default: %(default)s)",
    )
    demo.add_argument(
        "--data-dir",
        type=_data_dir,
        metavar="DIR",
        help="keep its data here, and resume from it next time "
        "(default: a temporary directory, removed when the demo stops)",
    )
    demo.add_argument(
        "--pipelines",
        type=Path,
        metavar="DIR",
        help="run your pipeline files in DIR (only read) instead of the demo's own, drafted "
        "by your LLM when GATEHOUSE_LLM__* is set (environment or ./.env)",
    )
    demo.add_argument("--verbose", action="store_true", help="log what the bot and engine do")
    check = add("check", cli_check.check, "check settings and pipeline files; exit 1 on any error")
    check.add_argument(
        "--online",
        action="store_true",
        help="also ask Telegram, the LLM, mail servers and webhook hosts (sends nothing)",
    )
    cli_dry_run.add_arguments(
        add("dry-run", cmd_dry_run, "fetch and draft now, print the cards; nothing kept or sent"),
        positive,
    )
    cli_voice.add_arguments(
        add(
            "voice",
            cli_voice.cmd,
            "a text's tells, with a pipeline's voice rules; exit 1 on a block",
        )
    )
    add(
        "health", cli_reads.cmd_health, "exit 0 while the bot runs, answers and all its workers run"
    )
    status = add("status", cli_reads.cmd_status, "every pipeline, or one pipeline's runs")
    status.add_argument(
        "pipeline", nargs="?", help="show this pipeline's recent runs (default: every pipeline)"
    )
    status.add_argument("--verbose", action="store_true", help="also the store's WAL size")
    runs = add("runs", cli_reads.cmd_runs, "recent runs with the last green and first red run")
    runs.add_argument("pipeline", nargs="?", help="only this pipeline (default: all)")
    _limit(runs, operations.RUNS_SHOWN, "runs shown")
    add("pending", cli_reads.cmd_pending, "items awaiting approval, oldest first")
    for name, dropped_by, fn in (
        ("filtered", "filter dropped", cli_reads.cmd_filtered),
        ("skipped", "triage skipped", cli_reads.cmd_skipped),
    ):
        dropped = add(name, fn, f"entries a pipeline's {dropped_by}")
        dropped.add_argument("pipeline", help=PIPELINE_HELP)
        _limit(dropped, operations.FILTERED_SHOWN, f"entries shown, the most recently {name} first")
    stats = add("stats", cli_reads.cmd_stats, "the editor's numbers per pipeline")
    stats.add_argument("pipeline", nargs="?", help="one pipeline (default: every pipeline)")
    stats.add_argument(
        "--days",
        type=int,
        choices=operations.WINDOWS,
        default=operations.WINDOWS[0],
        help="the window, in days (default: %(default)s)",
    )
    add("history", cli_reads.cmd_history, "one item's events").add_argument(
        "item", type=item_id, help="the item id, as /pending and the cards show it"
    )
    replay = add("replay", cli_writes.cmd_replay, "replay a dropped item as a new attempt")
    replay.add_argument("item", type=item_id, help="the item id, as /pending and the cards show it")
    replay.add_argument("--force", action="store_true", help="also replay a dispatched item")
    replay.add_argument(
        "--fresh",
        action="store_true",
        help="pay for a new LLM draft instead of showing one the provider already wrote",
    )
    for action, text in cli_decisions.HELP.items():
        cli_decisions.add_arguments(add(action, cli_decisions.cmd_decide, text), action, item_id)
    add("budget", cli_reads.cmd_budget, "spend, holds and limits, today and this month")
    budget = add("set-budget", cli_writes.cmd_set_budget, "set a scope's day or month limit in USD")
    budget.add_argument("scope", help="global or a pipeline name")
    budget.add_argument("period", choices=budgets.PERIODS, help="the limit's period")
    budget.add_argument("amount", help="USD, like 25 or 12.50")
    for name, text in (
        ("run-now", "run a pipeline at the scheduler's next pass"),
        ("pause", "stop a pipeline's schedule"),
        ("resume", "restart a pipeline's schedule"),
    ):
        add(name, cli_writes.cmd_schedule, text).add_argument("pipeline", help=PIPELINE_HELP)
    settle = add(
        "reconcile-claim", cli_writes.cmd_reconcile_claim, "settle an uncertain AI spend claim"
    )
    settle.add_argument(
        "claim", type=positive, nargs="?", help="the claim id (from /budget or its alert)"
    )
    settle.add_argument("amount", nargs="?", help="what the provider charged in USD (0: nothing)")
    settle.add_argument("evidence", nargs="?", help="the provider's request id or invoice line")
    cli_writes.add_uncertain_arguments(settle)
    reconcile = add(
        "reconcile", cli_reads.cmd_reconcile, "compare file dispatch folders with the store"
    )
    mode = reconcile.add_mutually_exclusive_group()
    mode.add_argument("--backfill", action="store_true", help="rewrite missing files")
    mode.add_argument("--prune", action="store_true", help="delete gatehouse's orphan files")
    cli_audit.add_arguments(
        add("audit", cli_reads.cmd_audit, "verify, export or check the event log")
    )
    sweep = add("sweep", cli_writes.cmd_sweep, "forget seen ids older than --days")
    sweep.add_argument(
        "--days",
        type=positive,
        default=90,
        metavar="N",
        help="forget seen ids older than this many days (default: %(default)s)",
    )
    cli_tokens.add_parser(add)
    add("backup", cli_reads.cmd_backup, "online backup to a new file, verified").add_argument(
        "path", type=Path, help="the new file (it must not exist yet)"
    )
    add(
        "migrate-to-postgres",
        cmd_migrate_to_postgres,
        "copy the SQLite store into the empty database GATEHOUSE_DATABASE_URL names",
    )
    return parser, table


def main(argv: Sequence[str] | None = None) -> int:
    parser, table = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":  # its own settings: the environment's must not matter
        from bot import early

        with early.loading():
            from bot.demo import run as demo  # PTB loads only for the commands that need it

        return demo.main(
            port=args.port, data_dir=args.data_dir, verbose=args.verbose, pipelines=args.pipelines
        )
    if args.command == "run":
        from bot import early

        return early.run(args.env_file, args.data_dir)
    try:
        cfg = settings_mod.load_for(args.env_file, args.data_dir)
    except settings_mod.SettingsInvalid as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 2
    try:
        if args.command not in NEED_NO_STORE:
            need_store(cfg)
        return table[args.command](cfg, args, datetime.now(UTC))
    except USAGE_ERRORS as exc:
        print(f"gatehouse {args.command}: {exc}", file=sys.stderr)
        return 2
    except errors.StoreError as exc:
        # The store itself failed (busy, corrupt, full): not the caller's usage, same code.
        print(f"gatehouse {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
