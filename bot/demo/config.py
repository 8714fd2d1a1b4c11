"""The demo's own settings: made from its options alone, written where its CLI finds them."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pydantic_settings

from bot import settings as settings_mod
from bot.demo import content
from pipelines.providers import client as providers
from store.backends import datadir
from store.ledger import prices as ledger_prices

TOKEN = "123456789:gatehouse-offline-demo-token"  # noqa: S105  # not a secret: a fake


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


def prepare_data_dir(data_dir: Path | None) -> tuple[Path, bool]:
    """The demo's data directory and whether it is temporary: a fresh private temp dir
    (0700), or the one given."""
    if data_dir is None:
        return Path(tempfile.mkdtemp(prefix="gatehouse-demo-")), True
    # The store's own rules (0700, ours, not a symlink), checked before anything is written.
    return datadir.prepare(data_dir.expanduser().absolute()), False


def write_env_file(cfg: settings_mod.Settings) -> Path:
    """The demo's own settings, so that every command the banner suggests (status, check,
    dry-run --llm, ...) works as printed from any directory against the running demo
    (the CLI reads them with --env-file). Its token and key are the demo's made-up ones."""
    env_file = cfg.data_dir / "demo.env"
    llm = cfg.llm
    assert llm is not None, "the demo drafts with its own LLM"
    prices = {model: price.model_dump() for model, price in cfg.prices.items()}
    lines = {
        "DATA_DIR": str(cfg.data_dir),
        "PIPELINES_DIR": str(cfg.pipelines_dir),
        "TELEGRAM__OPERATORS": ",".join(map(str, cfg.telegram.operators)),
        "TELEGRAM__TOKEN": TOKEN,
        "TELEGRAM__BASE_URL": cfg.telegram.base_url,
        "LLM__KIND": llm.kind,
        "LLM__BASE_URL": llm.base_url,
        "LLM__API_KEY": llm.api_key.get_secret_value(),
        "LLM__MODEL": llm.model,
        "PRICES": f"'{json.dumps(prices)}'",  # quoted: dotenv keeps the JSON's quotes
    }
    text = "".join(f"{settings_mod.ENV_PREFIX}{key}={value}\n" for key, value in lines.items())
    with datadir.private_files():
        env_file.write_text(
            "# Written by `gatehouse demo`: what the CLI needs to find it.\n" + text
        )
    return env_file


def chosen_llm(
    yours: providers.ProviderSettings | None,
    prices: dict[str, ledger_prices.Price],
    local_url: str,
) -> tuple[providers.ProviderSettings, dict[str, ledger_prices.Price]]:
    """The LLM the demo drafts with and its prices: yours when given, else the local
    model's at `local_url`."""
    if yours is None:
        return content.llm(local_url), content.PRICES
    return yours, prices


def settings(
    data_dir: Path,
    pipelines_dir: Path,
    base_url: str,
    llm: providers.ProviderSettings,
    prices: dict[str, ledger_prices.Price],
) -> settings_mod.Settings:
    """The demo's settings, drafting with `llm` at `prices` (chosen_llm)."""
    telegram = settings_mod.TelegramSettings(
        token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
        base_url=base_url,
        operators=list(content.OPERATORS),
        rate_limit_per_minute=0,  # a person clicking around a demo is not a flood
    )
    return _DemoSettings(
        data_dir=data_dir,
        pipelines_dir=pipelines_dir,
        telegram=telegram,
        llm=llm,
        prices=prices,
    )
