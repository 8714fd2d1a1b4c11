"""Your own pipelines in the demo: `gatehouse demo --pipelines DIR`.

    mine = yours.check(Path("pipelines/mine"))      # raises DemoError naming what is wrong
    llm, prices = yours.llm_settings(env_file=None)  # yours from .env / environment, or None

The demo then runs the pipeline files of DIR, with their real sources and dispatch
targets, instead of its own, and drafts with your LLM settings and prices when they are
set (GATEHOUSE_LLM__* and GATEHOUSE_PRICES, in the environment or ./.env); otherwise with
its local model at its own price. Telegram is still the local stand-in and the web chat
page the console, so no bot token is needed. DIR is only read: the store, the settings
file the CLI reads and everything else the demo writes go into its data directory.
"""

from __future__ import annotations

from pathlib import Path

from bot import settings as settings_mod
from bot.demo import content
from pipelines.config import spec
from pipelines.providers import client as providers
from store.ledger import prices as ledger_prices


class PipelinesError(Exception):
    """The --pipelines directory cannot be run; the message says what to change."""


def check(directory: Path) -> Path:
    """`directory` as an absolute path once its pipeline files load for the demo's
    operators; a missing directory, one without pipeline files or a file with errors
    raises PipelinesError with every error, `file:line: field: reason`."""
    path = directory.expanduser().absolute()
    if not path.is_dir():
        raise PipelinesError(f"--pipelines {directory}: no such directory")
    loaded = spec.load_dir(path, spec.LoadContext(frozenset(content.OPERATORS)))
    if loaded.errors:
        raise PipelinesError(
            f"--pipelines {directory}: fix these first (`gatehouse check` says the same):\n"
            + spec.format_errors(loaded.errors)
        )
    if not loaded.pipelines:
        raise PipelinesError(
            f"--pipelines {directory}: no pipeline file (*.yaml or *.yml) found there"
        )
    return path


def first_pipeline(directory: Path) -> str:
    """The first pipeline's name (for the banner's dry-run example)."""
    loaded = spec.load_dir(directory, spec.LoadContext(frozenset(content.OPERATORS)))
    return sorted(loaded.pipelines)[0]


def llm_settings(
    env_file: Path | None,
) -> tuple[providers.ProviderSettings | None, dict[str, ledger_prices.Price]]:
    """Your LLM provider and prices, as `gatehouse run` would read them (the environment,
    then `env_file` or ./.env); (None, {}) when no provider is set. A bad setting raises
    settings.SettingsInvalid naming the variable, never the value."""
    cfg = settings_mod.load_for(env_file)
    if cfg.llm is None:
        return None, {}
    return cfg.llm, dict(cfg.prices)


def banner(url: str, pipelines: Path, data: Path, removed: str, commands: list[str]) -> str:
    """What the terminal says once the demo runs your pipelines."""
    return (
        "\ngatehouse demo is running your pipelines (no Telegram: the console is this page).\n"
        f"\n  open       {url}\n"
        f"\n  pipelines  {pipelines}  (only read, never written)"
        f"\n  data       {data}{removed}\n"
        "\nEach new item of your sources arrives as a card within a minute, drafted as its"
        "\npipeline says (by your LLM when GATEHOUSE_LLM__* is set, else by the demo's local"
        "\nmodel). Approve sends it to the pipeline's real dispatch target. The day's budget"
        f"\nis ${content.BUDGET_USD} unless one is set (/budget shows it)."
        "\nFrom another terminal, the CLI sees it too:"
        + "".join(f"\n  {command}" for command in commands)
        + "\n\nPress Ctrl-C to stop.\n"
    )
