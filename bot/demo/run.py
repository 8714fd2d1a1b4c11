"""The offline demo: gatehouse end to end with no Telegram token and no API key.

    gatehouse demo                      # or, from a fresh clone: python3 dev.py demo
    gatehouse demo --port 8080 --data-dir ~/gatehouse-demo

Everything runs in this one process, on loopback only, on free ports:

- the local Bot API server (`bot.demo.botapi.server`) stands in for Telegram;
- a web chat page (`bot.demo.webchat`) shows the operator's chat with the bot and lets you tap
  the buttons and type commands; it also serves the bundled feed
  `pipelines/examples/feeds/demo.xml`;
- the real bot (`bot.app.serve`) and engine (`pipelines.runtime`), exactly as in
  production, with a made-up token and one made-up operator, the template drafter, and a
  `news` pipeline written into the data directory that files approved posts under `out/`.

Data goes into a fresh private temporary directory unless `--data-dir` names one. Ctrl-C
stops everything cleanly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pydantic_settings

from bot import app, logs
from bot import settings as settings_mod
from bot.demo import webchat
from bot.demo.botapi import server as localapi
from pipelines import runtime as runtime_mod
from store import datadir, errors

log = logging.getLogger(__name__)

#: A made-up token in Telegram's shape; only the local Bot API server ever sees it.
TOKEN = "123456789:gatehouse-offline-demo-token"  # noqa: S105  # not a secret: a fake
#: The made-up operator the page speaks as (their private chat has the same id).
OPERATOR = 1001
#: The demo operator's first name and username, shown wherever the bot says who acted.
OPERATOR_NAMES = ("Alex", "alex")
FEED = Path(__file__).resolve().parents[2] / "pipelines" / "examples" / "feeds" / "demo.xml"
FEED_PATH = "/feeds/demo.xml"

PIPELINE = """\
# Written by `gatehouse demo`: the bundled feed, served by the demo's web page server.
name: news
schedule: 15m
sources:
  - type: rss
    url: {feed_url}
    scope: demo-news
draft:
  drafter: template
approval:
  quorum: 1
  window: 24h
dispatch:
  type: file
  path: {out}
"""


@dataclasses.dataclass(frozen=True)
class Options:
    #: Where the store, the pipeline file and dispatched posts go; None: a fresh temp dir.
    data_dir: Path | None = None
    #: The web page's port on 127.0.0.1; 0 picks a free one.
    port: int = 0


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


class DemoError(Exception):
    """The demo cannot start; the message says what to change."""


class _DemoSettings(settings_mod.Settings):
    """Only what the demo passes: a real bot's environment or .env must not leak in."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[pydantic_settings.BaseSettings],
        init_settings: pydantic_settings.PydanticBaseSettingsSource,
        env_settings: pydantic_settings.PydanticBaseSettingsSource,
        dotenv_settings: pydantic_settings.PydanticBaseSettingsSource,
        file_secret_settings: pydantic_settings.PydanticBaseSettingsSource,
    ) -> tuple[pydantic_settings.PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def prepare_data_dir(data_dir: Path | None) -> Path:
    """The demo's data directory: a fresh private temp dir (0700), or the one given."""
    if data_dir is None:
        return Path(tempfile.mkdtemp(prefix="gatehouse-demo-"))
    # The store's own rules (0700, ours, not a symlink), checked before anything is written.
    return datadir.prepare(data_dir.expanduser().absolute())


def write_pipeline(data_dir: Path, feed_url: str) -> tuple[Path, Path]:
    """Write the demo's pipeline; returns (pipelines dir, dispatch dir)."""
    pipelines_dir, out = data_dir / "pipelines", data_dir / "out" / "news"
    pipelines_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (pipelines_dir / "news.yaml").write_text(PIPELINE.format(feed_url=feed_url, out=out))
    return pipelines_dir, out


def write_env_file(data_dir: Path, pipelines_dir: Path) -> Path:
    """The settings the CLI needs to see this demo, so the banner's command works as
    printed from any directory (the CLI reads them with --env-file)."""
    env_file = data_dir / "demo.env"
    env_file.write_text(
        "# Written by `gatehouse demo`: what the CLI needs to find it.\n"
        f"GATEHOUSE_DATA_DIR={data_dir}\nGATEHOUSE_PIPELINES_DIR={pipelines_dir}\n"
    )
    return env_file


def cli_command(running: Running, command: str) -> str:
    """A CLI command that reads this demo's store and pipelines, from any directory."""
    return f"{shlex.quote(_cli())} --env-file {shlex.quote(str(running.env_file))} {command}"


def settings(data_dir: Path, pipelines_dir: Path, base_url: str) -> settings_mod.Settings:
    telegram = settings_mod.TelegramSettings(
        token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
        base_url=base_url,
        operators=[OPERATOR],
        rate_limit_per_minute=0,  # a person clicking around a demo is not a flood
    )
    return _DemoSettings(data_dir=data_dir, pipelines_dir=pipelines_dir, telegram=telegram)


async def run(
    options: Options, stop: asyncio.Event, ready: Callable[[Running], None] | None = None
) -> None:
    """Start every part, call `ready`, run until `stop` is set, then stop in reverse order."""
    data_dir = prepare_data_dir(options.data_dir)
    with localapi.LocalBotApi(token=TOKEN) as api:
        api.name_user(OPERATOR, *OPERATOR_NAMES)  # as a Telegram account would carry them
        web = _start_web(api, options.port)
        try:
            feed_url = f"http://{localapi.HOST}:{web.port}{FEED_PATH}"
            pipelines_dir, out = write_pipeline(data_dir, feed_url)
            env_file = write_env_file(data_dir, pipelines_dir)
            cfg = settings(data_dir, pipelines_dir, api.base_url)
            application = app.build(cfg, TOKEN)
            runtime = await runtime_mod.Runtime.start(app.runtime_config(cfg, application))
            try:
                serving = app.serve(cfg, TOKEN, runtime, stop, application)
                bot = asyncio.create_task(serving, name="demo-bot")
                if ready is not None:
                    ready(Running(web.url, data_dir, out, env_file, api, web))
                await bot
            finally:
                await runtime.stop()
        finally:
            # The Bot API server stops after this block, which also ends the page's long polls.
            web.stop()


def _start_web(api: localapi.LocalBotApi, port: int) -> webchat.WebChat:
    feed = webchat.StaticFile(FEED, "application/rss+xml")
    web = webchat.WebChat(api, user_id=OPERATOR, port=port, files={FEED_PATH: feed})
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
    print(
        "\ngatehouse demo is running (no Telegram, no API key: everything is on this machine).\n"
        f"\n  open  {running.url}\n"
        f"\n  data  {running.data_dir}"
        f"\n  posts {running.out_dir}  (approved drafts land here)\n"
        "\nCards for the bundled feed arrive in a few seconds. Tap Approve, Reject or Edit;"
        "\ntry /status, /pending, /budget. From another terminal, the CLI sees it too:"
        f"\n  {cli_command(running, 'status')}"
        "\n\nPress Ctrl-C to stop.\n",
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
    kept = f"; its data stays in {started[0].data_dir}" if started else ""
    print(f"gatehouse demo stopped{kept}.", flush=True)


def main(*, port: int = 0, data_dir: Path | None = None, verbose: bool = False) -> int:
    """`gatehouse demo`: 0 after Ctrl-C, 2 for a bad port or data directory."""
    if not 0 <= port <= 65535:
        print(
            f"gatehouse demo: --port must be 0 (any free port) to 65535, got {port}",
            file=sys.stderr,
        )
        return 2
    logs.setup("INFO" if verbose else "WARNING", [TOKEN])
    try:
        asyncio.run(_main(Options(data_dir=data_dir, port=port)))
    except (DemoError, *errors.STARTUP_ERRORS) as exc:
        print(f"gatehouse demo: {exc}", file=sys.stderr)
        return 2
    return 0
