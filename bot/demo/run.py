"""The offline demo: gatehouse end to end with no Telegram token and no API key.

    gatehouse demo                      # or, from a fresh clone: python3 dev.py demo
    gatehouse demo --port 8080 --data-dir ~/gatehouse-demo
    gatehouse demo --pipelines pipelines/mine   # your own pipelines as cards (bot.demo.yours)

Everything runs in this one process, on loopback only:

- the local Bot API server (`bot.demo.botapi.localapi`) stands in for Telegram;
- a web chat page (`bot.demo.webchat`, port 8780 unless --port says otherwise) shows the chat
  of any of three made-up operators with the bot, lets you tap the buttons and type
  commands, and serves the bundled feeds;
- the demo's LLM (`bot.demo.llm`), an OpenAI-compatible server with a price, so drafts
  go through the budget ledger: cards show a cost and /budget fills up;
- the real bot (`bot.app.serve`) and engine (`pipelines.service.runtime`), exactly as in
  production, with the pipelines of `bot.demo.content`: `news` (LLM drafts; a wire's
  entries dropped by its filter or skipped by its triage, see /skipped news), `team`
  (quorum 2: two of the three operators approve, an edited draft too) and `urgent` (a
  short approval window, so an SLA warning arrives in the first minute).

With `--pipelines DIR` the pipelines are the files of DIR instead, read and never written
(see `bot.demo.yours`), drafted by your LLM when its settings are set.

Data goes into a fresh private temporary directory, removed at the end, unless
`--data-dir` names one: then a later run with the same directory resumes, with the
conversation so far on the page and the cards still open sent again. Ctrl-C stops
everything cleanly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shlex
import shutil
import signal
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from bot import app, demo
from bot import settings as settings_mod
from bot.demo import config, content, site, webchat, yours
from bot.demo import llm as demo_llm
from bot.demo import resume as demo_resume
from bot.demo.botapi import localapi
from bot.ground import logs
from pipelines import operations
from pipelines.approval import card_trail
from pipelines.providers import client as providers
from pipelines.service import runtime as runtime_mod
from store import db, errors
from store.ledger import budgets
from store.ledger import prices as ledger_prices

log = logging.getLogger(__name__)

#: A made-up token in Telegram's shape; only the local Bot API server ever sees it.
TOKEN = config.TOKEN
#: The operator the page speaks as first (their private chat has the same id).
OPERATOR = content.OPERATORS[0]
FEED_PATH = "/feeds/demo.xml"
FEED = content.FEEDS[FEED_PATH]
#: The actor of what the demo itself writes to the store (its budget).
ACTOR = "system"


@dataclasses.dataclass(frozen=True)
class Options:
    #: Where the store, the pipeline files and dispatched posts go; None: a temp dir.
    data_dir: Path | None = None
    #: The web page's port on 127.0.0.1; 0 picks a free one.
    port: int = demo.DEFAULT_PORT
    #: Your pipeline files (only read), instead of the demo's own; None: the demo's.
    pipelines_dir: Path | None = None
    #: Your LLM provider and its prices; None: the demo's local model at its price.
    llm: providers.ProviderSettings | None = None
    prices: dict[str, ledger_prices.Price] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Running:
    """What a started demo tells its caller."""

    url: str
    data_dir: Path
    out_dir: Path
    #: The settings file the CLI reads to see this demo (`gatehouse --env-file ...`).
    env_file: Path
    api: localapi.LocalBotApi
    web: webchat.WebChat
    #: Messages of an earlier run put back on the page, and items whose cards were sent again.
    restored: int = 0
    resent: tuple[int, ...] = ()
    #: True when the data directory is a temporary one, removed when the demo stops.
    temporary: bool = False
    #: The pipeline files it runs, and whether they are yours (--pipelines) and read only.
    pipelines_dir: Path | None = None
    yours: bool = False
    #: The demo's own files someone changed since it wrote them, left as they are.
    kept: tuple[str, ...] = ()


class DemoError(Exception):
    """The demo cannot start; the message says what to change."""


#: The CLI commands the banner suggests: each works against the running demo (a test runs them).
BANNER_COMMANDS = ("status", "pending", "check", "dry-run news")


def banner_commands(running: Running) -> tuple[str, ...]:
    """BANNER_COMMANDS, with your first pipeline's dry run when the pipelines are yours."""
    if running.yours and running.pipelines_dir is not None:
        return (*BANNER_COMMANDS[:-1], f"dry-run {yours.first_pipeline(running.pipelines_dir)}")
    return BANNER_COMMANDS


def cli_command(running: Running, command: str) -> str:
    """A CLI command that reads this demo's store and pipelines, from any directory."""
    return f"{shlex.quote(_cli())} --env-file {shlex.quote(str(running.env_file))} {command}"


async def prepare_store(cfg: settings_mod.Settings, now: datetime) -> tuple[int, ...]:
    """Set the demo's budget unless one is set, and send the cards still open again
    (their old messages lost their buttons on the page); returns the items resent."""
    store = await db.open(settings_mod.store_config(cfg))
    try:
        limits = await store.read(budgets.configured_sync, ["global"])
        if not limits:
            await operations.set_budget(store, "global", "day", content.BUDGET_USD, ACTOR, now)
        return tuple(await card_trail.resend_open(store, now))
    finally:
        await store.close()


async def run(
    options: Options, stop: asyncio.Event, ready: Callable[[Running], None] | None = None
) -> None:
    """Start every part, call `ready`, run until `stop` is set, then stop in reverse order."""
    data_dir, temporary = config.prepare_data_dir(options.data_dir)
    try:
        with (
            demo_llm.DemoLLM(delay_s=content.LLM_DELAY_S) as llm,
            localapi.LocalBotApi(token=TOKEN) as api,
        ):
            for operator, (first_name, username) in content.NAMES.items():
                api.name_user(operator, first_name, username)  # as Telegram accounts carry them
            api.add_group(content.ROOM, content.ROOM_TITLE, list(content.OPERATORS), forum=True)
            restored = demo_resume.restore_chat(api, data_dir)
            web = _start_web(api, options.port)
            saver = demo_resume.Saver(api, data_dir).start()
            try:
                files = _pipelines(options, data_dir, web.url)
                # The news site's pages and pictures: the page server's own URL is in them.
                web.files.update(site.files(web.url))
                model, prices = config.chosen_llm(options.llm, options.prices, llm.base_url)
                cfg = config.settings(data_dir, files.pipelines_dir, api.base_url, model, prices)
                env_file = config.write_env_file(cfg)
                resent = await prepare_store(cfg, datetime.now(UTC))
                running = Running(
                    web.url,
                    data_dir,
                    files.out_dir,
                    env_file,
                    api,
                    web,
                    restored,
                    resent,
                    temporary,
                    files.pipelines_dir,
                    options.pipelines_dir is not None,
                    files.kept,
                )
                await _serve(cfg, stop, lambda: ready(running) if ready else None)
            finally:
                saver.stop()
                # The Bot API server stops after this block, which ends the page's long polls.
                web.stop()
    finally:
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)


def _pipelines(options: Options, data_dir: Path, web_url: str) -> content.Files:
    """Your pipeline files, read where they are, or the demo's own, written into its data
    directory (never into yours)."""
    if options.pipelines_dir is not None:
        return content.Files(yours.check(options.pipelines_dir), data_dir / "out")
    return content.write(data_dir, web_url)


async def _serve(
    cfg: settings_mod.Settings, stop: asyncio.Event, started: Callable[[], None]
) -> None:
    """The bot and engine as `gatehouse run` starts them, with the demo's short SLA pass."""
    application = app.build(cfg, TOKEN)
    config = dataclasses.replace(
        app.runtime_config(cfg, application), sweep_every_s=content.SWEEP_EVERY_S
    )
    runtime = await runtime_mod.Runtime.start(config)
    try:
        bot = asyncio.create_task(
            app.serve(cfg, TOKEN, runtime, stop, application), name="demo-bot"
        )
        started()
        await bot
    finally:
        await runtime.stop()


def _start_web(api: localapi.LocalBotApi, port: int) -> webchat.WebChat:
    feeds = {
        path: webchat.StaticFile(file, "application/rss+xml")
        for path, file in content.FEEDS.items()
    }
    web = webchat.WebChat(
        api,
        operators=content.OPERATORS,
        port=port,
        files=feeds,
        room=(content.ROOM, content.ROOM_TITLE),
    )
    try:
        return web.start()
    except OSError as exc:
        raise DemoError(
            f"cannot listen on {localapi.HOST}:{port} ({exc.strerror or exc}); "
            "choose another --port, or 0 for any free one"
        ) from None


def _cli() -> str:
    """How to call the CLI from here: the venv's script, if it is not on PATH."""
    beside = Path(sys.executable).parent / "gatehouse"
    on_path = shutil.which("gatehouse")
    return "gatehouse" if on_path and Path(on_path) == beside else str(beside)


def _print_banner(running: Running) -> None:
    resumed = ""
    if running.restored or running.resent:
        resumed = (
            f"\nResumed: {running.restored} earlier messages are back on the page and "
            f"{len(running.resent)} open card(s) were sent again.\n"
        )
    removed = "  (removed when the demo stops)" if running.temporary else ""
    if running.kept:
        resumed += f"\nKept as you changed them: {', '.join(running.kept)}.\n"
    if running.yours:
        _print_yours(running, removed)
        return
    print(
        "\ngatehouse demo is running (no Telegram, no API key: everything is on this machine).\n"
        f"\n  open  {running.url}\n"
        f"\n  data  {running.data_dir}{removed}"
        f"\n  posts {running.out_dir}  (approved drafts land here)\n"
        f"{resumed}"
        "\nCards arrive in a few seconds: `news` is drafted by a local stand-in LLM with a"
        "\nprice (each card shows its cost; /budget shows the spend), `team` needs two of the"
        "\nthree operators (switch at the top of the page; an editor's own version needs the"
        "\nother two), and `urgent` must be approved within"
        "\n90 s (its SLA warning comes 40 s before that). `news` also reads a wire: its filter"
        "\ndrops the sponsored entries and its triage skips the rest, with reasons."
        "\nTap Approve, Reject or Edit; try /status, /pending, /budget, /skipped news, /stats."
        "\nFrom another terminal, the CLI sees it too:"
        + "".join(f"\n  {cli_command(running, command)}" for command in BANNER_COMMANDS)
        + "\n\nPress Ctrl-C to stop.\n",
        flush=True,
    )


def _print_yours(running: Running, removed: str) -> None:
    assert running.pipelines_dir is not None
    commands = [cli_command(running, command) for command in banner_commands(running)]
    print(
        yours.banner(running.url, running.pipelines_dir, running.data_dir, removed, commands),
        flush=True,
    )


async def _main(options: Options) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    started: list[Running] = []

    def ready(running: Running) -> None:
        started.append(running)
        _print_banner(running)

    await run(options, stop, ready)
    if not started:
        print("gatehouse demo stopped.", flush=True)
    elif started[0].temporary:
        print(
            "gatehouse demo stopped; its data was removed (keep it with --data-dir DIR).",
            flush=True,
        )
    else:
        print(f"gatehouse demo stopped; its data stays in {started[0].data_dir}.", flush=True)


def main(
    *,
    port: int = demo.DEFAULT_PORT,
    data_dir: Path | None = None,
    verbose: bool = False,
    pipelines: Path | None = None,
) -> int:
    """`gatehouse demo`: 0 after Ctrl-C, 2 for a bad port, data directory, pipelines
    directory or LLM setting."""
    if not 0 <= port <= 65535:
        print(
            f"gatehouse demo: --port must be 0 (any free port) to 65535, got {port}",
            file=sys.stderr,
        )
        return 2
    try:
        options = _options(port, data_dir, pipelines)
    except (yours.PipelinesError, settings_mod.SettingsInvalid) as exc:
        print(f"gatehouse demo: {exc}", file=sys.stderr)
        return 2
    secrets = [options.llm.api_key.get_secret_value()] if options.llm else []
    logs.setup("INFO" if verbose else "WARNING", [TOKEN, *filter(None, secrets)])
    try:
        asyncio.run(_main(options))
    except (DemoError, yours.PipelinesError, *errors.STARTUP_ERRORS) as exc:
        print(f"gatehouse demo: {exc}", file=sys.stderr)
        return 2
    return 0


def _options(port: int, data_dir: Path | None, pipelines: Path | None) -> Options:
    """The demo's options; with your pipelines, checked first, and your LLM when set."""
    if pipelines is None:
        return Options(data_dir=data_dir, port=port)
    llm, prices = yours.llm_settings(None)
    return Options(data_dir, port, yours.check(pipelines), llm, prices)
