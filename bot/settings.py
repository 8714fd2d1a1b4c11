"""Every setting gatehouse reads, from the environment (prefix GATEHOUSE_, nesting `__`) or `.env`.

    settings = settings.load()          # raises SettingsInvalid, which names fields, never values

`.env.example` documents each one with its default.
"""

from __future__ import annotations

import json
import re
import unicodedata
import urllib.parse
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings import SettingsError as _SourceError

from pipelines.providers import settings as provider_settings  # the model, not the client
from store import db
from store.ledger import prices as ledger_prices

if TYPE_CHECKING:
    from pipelines.config import spec

ENV_PREFIX = "GATEHOUSE_"


class SettingsInvalid(Exception):
    """The settings are invalid; the message lists each field's variable and reason."""


class StoreSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: FULL survives power loss with every commit; NORMAL may lose the last commits.
    synchronous: Literal["FULL", "NORMAL"] = "FULL"
    #: The WAL file's bound under steady load, in MiB (checkpoints start it over well before).
    wal_max_mb: int = Field(default=64, ge=1, le=4096)
    #: Sent messages and stored LLM outputs older than this many days are pruned
    #: (events, drafts, items and dispatch records are kept).
    retention_days: int = Field(default=30, ge=1, le=3650)
    #: PostgreSQL: let the server keep the plans of statements run often. Turn off behind
    #: a pooler in transaction mode that does not track them (PgBouncer before 1.21, or
    #: without max_prepared_statements).
    prepared_statements: bool = True


class SourceSettings(BaseModel):
    """Defaults for every source; a source's own `max_bytes` / `max_decompressed_bytes` win."""

    model_config = ConfigDict(extra="forbid")

    #: Largest answer a source accepts as sent (compressed), in bytes (10 MiB).
    max_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    #: Largest answer a source accepts once decompressed, in bytes (10 MiB).
    max_decompressed_bytes: int = Field(default=10 * 1024 * 1024, ge=1)


class EngineSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: New items one run of a pipeline drafts at most; the rest go to a follow-up run.
    max_items_per_tick: int = Field(default=10_000, ge=1)


class ClusterSettings(BaseModel):
    """Several workers on one PostgreSQL store (on SQLite the one process always leads)."""

    model_config = ConfigDict(extra="forbid")

    #: The leader's lease in seconds: a new leader takes over about this long after the
    #: old one died; workers renew it and beat every quarter of it.
    lease_ttl_s: float = Field(default=6.0, ge=2.0, le=120.0)
    #: How long a worker keeps the dispatch rows it took, in seconds: longer than one
    #: batch takes to deliver; a worker that dies holding rows delays them this long.
    dispatch_lease_s: float = Field(default=300.0, ge=10.0, le=3600.0)


class AuditSettings(BaseModel):
    """The audit chain: the leader seals new events into it every tenth of a second."""

    model_config = ConfigDict(extra="forbid")

    #: The promised longest wait, in seconds, from an event's write to its seal: past it
    #: the operators get an alert and gatehouse_audit_unsealed_age_seconds shows it.
    max_seal_delay_s: float = Field(default=1.0, ge=0.5, le=3600.0)


class TelegramSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: SecretStr | None = None
    #: The Bot API base; the token is appended. Point it at a self-hosted or local server.
    base_url: str = "https://api.telegram.org/bot"
    #: Telegram user ids allowed to operate the bot, comma-separated.
    operators: Annotated[list[int], NoDecode] = Field(default_factory=list)
    #: Operators who may settle uncertain AI spend from the chat (the Not charged and
    #: Charged buttons), comma-separated; unset: every operator.
    settlers: Annotated[list[int], NoDecode] = Field(default_factory=list)
    #: Where alerts go; default: each operator's private chat.
    alerts_chat: int | None = None
    #: One card per item in this group (id or @username) for every pipeline that names
    #: no approval.chat of its own; default: a card in each operator's private chat.
    cards_chat: int | str | None = None
    #: Messages per minute into one group (Telegram allows about 20).
    group_messages_per_minute: float = Field(default=20.0, gt=0)
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None
    webhook_secret: SecretStr | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(default=8443, ge=1, le=65535)
    #: Commands and taps one operator may send per minute; 0 turns the limit off.
    rate_limit_per_minute: int = Field(default=60, ge=0)
    #: Key for the HMAC tag on buttons; unset: derived from the token (buttons survive restarts).
    callback_secret: SecretStr | None = None
    #: Messages per second to the Bot API overall (Telegram allows about 30); raise it
    #: only for a local Bot API server without flood limits, as the benchmark does.
    flood_limit_per_second: float = Field(default=30.0, gt=0)
    #: New messages per second into any one chat (Telegram asks for about 1); edits of
    #: cards are not paced, so a tap's answer is never held back.
    chat_messages_per_second: float = Field(default=1.0, gt=0)

    @field_validator("token", "webhook_secret")
    @classmethod
    def _one_printable_word(cls, value: SecretStr | None) -> SecretStr | None:
        # A trailing newline (`echo token > file`) reaches every Bot API URL or header, and
        # Telegram only ever answers "not found": say it here, never the value.
        if value is not None:
            refuse_unprintable(value.get_secret_value())
        return value

    @field_validator("operators", "settlers", mode="before")
    @classmethod
    def _split_ids(cls, value: object) -> object:
        if isinstance(value, str):
            parts = [part.strip() for part in value.split(",") if part.strip()]
            for part in parts:
                if not part.lstrip("-").isdigit():
                    raise ValueError("must be Telegram user ids (integers) separated by commas")
            return [int(part) for part in parts]
        return value

    @field_validator("settlers")
    @classmethod
    def _settlers_operate(cls, value: list[int], info: ValidationInfo) -> list[int]:
        strangers = sorted(set(value) - set(info.data.get("operators", ())))
        if strangers:
            raise ValueError(
                f"must be operators too: {', '.join(map(str, strangers))} "
                "not in GATEHOUSE_TELEGRAM__OPERATORS"
            )
        return value


def refuse_unprintable(secret: str) -> None:
    """Raise ValueError naming the first character a token cannot hold (a control or
    invisible character, a space) by its kind, never the secret or where in it."""
    for at, char in enumerate(secret):
        category = unicodedata.category(char)
        if char in "\r\n":
            end = "a trailing newline?" if not secret[at:].strip() else "a line break"
            raise ValueError(f"holds a control character ({end})")
        if char == "\t":
            raise ValueError("holds a control character (a tab)")
        if category == "Cc":
            raise ValueError(f"holds a control character (U+{ord(char):04X})")
        if category in ("Cf", "Zl", "Zp"):  # a BOM, a zero-width space: invisible
            raise ValueError(f"holds an invisible character (U+{ord(char):04X})")
        if char.isspace():
            raise ValueError("holds a space: a token is one word, with nothing around it")


def split_address(text: str) -> tuple[str, int]:
    """`127.0.0.1:9464` or `[::1]:9464` -> (host, port)."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("must be host:port, for example 127.0.0.1:9464")
    return host, int(port)


class ListenSettings(BaseModel):
    """An opt-in HTTP listener: off while `listen` is unset."""

    model_config = ConfigDict(extra="forbid")

    #: host:port to listen on; bind 127.0.0.1 unless something in front needs more.
    listen: str | None = None

    @field_validator("listen")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            split_address(value)
        return value


class ApiSettings(ListenSettings):
    """The HTTP trigger's listener and what one token may ask of it."""

    #: Requests one token may make per minute; more are answered 429 with Retry-After.
    requests_per_minute: int = Field(default=60, ge=1, le=60_000)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
    )

    #: The private data directory (0700): the database, its WAL and the writer lock.
    data_dir: Path = Path("data")
    #: `postgresql://user:password@host/db`: keep the store in PostgreSQL (several
    #: workers may share it); unset, the store is SQLite in the data directory.
    database_url: SecretStr | None = None
    #: Where pipeline YAML files live.
    pipelines_dir: Path = Path("pipelines/examples")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    #: text: one readable line per record; json: one JSON object per line, for collectors.
    log_format: Literal["text", "json"] = "text"
    #: The Prometheus endpoint (GET /metrics), GATEHOUSE_METRICS__LISTEN.
    metrics: ListenSettings = Field(default_factory=ListenSettings)
    #: The HTTP trigger (bot/web/api.py), GATEHOUSE_API__LISTEN.
    api: ApiSettings = Field(default_factory=ApiSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    cluster: ClusterSettings = Field(default_factory=ClusterSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    telegram: TelegramSettings = Field(default_factory=TelegramSettings)
    sources: SourceSettings = Field(default_factory=SourceSettings)
    #: The LLM provider for `drafter: llm` pipelines; unset: they use the template drafter.
    llm: provider_settings.ProviderSettings | None = None
    #: Model name -> price in micros per million tokens (JSON); a model without one is not used.
    prices: dict[str, ledger_prices.Price] = Field(default_factory=dict)

    def secrets(self) -> list[str]:
        """Every secret these settings hold, to keep out of every log line (the bot token
        is checked and added at startup)."""
        held = [self.telegram.webhook_secret, self.telegram.callback_secret, self.database_url]
        if self.llm is not None:
            held.append(self.llm.api_key)
        found = [s.get_secret_value() for s in held if s is not None]
        if self.database_url is not None:
            found.append(urllib.parse.urlsplit(self.database_url.get_secret_value()).password or "")
        return [s for s in found if s]

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir(cls, value: object) -> object:
        # Path("") is the working directory: an empty setting must not quietly mean it.
        if isinstance(value, str) and not value.strip():
            raise ValueError("is empty; give a directory of gatehouse's own, e.g. data")
        return value

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        url = None if value is None else value.get_secret_value()
        if url is not None and (not url.startswith(POSTGRES_SCHEMES) or len(url) > URL_MAX):
            raise ValueError(
                f"must be a postgresql:// URL of at most {URL_MAX} characters"
                " (or unset, for SQLite in data_dir)"
            )
        return value


#: The URL schemes libpq accepts for PostgreSQL, and the longest URL taken.
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
URL_MAX = 2048


def env_name(loc: tuple[int | str, ...]) -> str:
    """The environment variable behind a validation error's location."""
    return ENV_PREFIX + "__".join(str(part).upper() for part in loc)


def load(**overrides: object) -> Settings:
    """Read the settings; a bad value raises SettingsInvalid naming the variable, not the value."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        errors = exc.errors(include_input=False)
        lines = [f"{_where(err['loc'])}: {_reason(err)}" for err in errors]
        if any(err["loc"][0] == "prices" for err in errors):
            lines.append(PRICES_HINT)
        raise SettingsInvalid("invalid settings:\n  " + "\n  ".join(lines)) from None
    except _SourceError as exc:
        raise SettingsInvalid(f"invalid settings:\n  {_unreadable(exc)}") from None


#: Said with every error about GATEHOUSE_PRICES: its shape and its unit.
PRICES_HINT = (
    'GATEHOUSE_PRICES is JSON such as {"gpt-4o-mini": {"input_micros_per_mtok": 150000,'
    ' "output_micros_per_mtok": 600000}}, in integer micro-dollars per million tokens'
    " ($0.15 is 150000)"
)


def _where(loc: tuple[int | str, ...]) -> str:
    """The variable behind an error; inside GATEHOUSE_PRICES, the model and the field
    (the JSON's keys: GATEHOUSE_PRICES__<MODEL>__... is no variable anyone set)."""
    if loc[0] == "prices" and len(loc) > 1:
        return f"GATEHOUSE_PRICES: model {loc[1]!r}" + "".join(f", {part}" for part in loc[2:])
    return env_name(loc)


def _reason(error: Any) -> str:
    from pipelines.config import file_errors

    return file_errors.plain(error)


#: pydantic-settings names the field it could not decode only in its message.
_UNDECODED = re.compile(r'field "(?P<field>\w+)" from source "(?P<source>\w+)"')


def _unreadable(exc: _SourceError) -> str:
    """A value pydantic-settings could not decode, by variable and reason (never the value:
    a JSON error's own message holds only a position)."""
    found = _UNDECODED.search(str(exc))
    if found is None:
        return str(exc)
    name = env_name((found["field"],))
    where = " (in the env file)" if found["source"].startswith("DotEnv") else ""
    cause = exc.__cause__
    if not isinstance(cause, json.JSONDecodeError):
        return f"{name}{where}: could not be read"
    reason = f"not valid JSON ({cause.msg} at line {cause.lineno} column {cause.colno})"
    hint = f"\n  {PRICES_HINT}" if found["field"] == "prices" else ""
    return f"{name}{where}: {reason}{hint}"


def load_for(env_file: Path | None = None, data_dir: Path | None = None) -> Settings:
    """The settings a command line asked for: `env_file` instead of ./.env, and
    `data_dir` over the environment and the file."""
    if env_file is not None and not env_file.is_file():
        raise SettingsInvalid(f"--env-file {env_file}: no such file")
    overrides: dict[str, object] = {"_env_file": env_file or ".env"}
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    return load(**overrides)


def pipeline_context(cfg: Settings) -> spec.LoadContext:
    """What pipeline files are checked against: the operators and the sources' byte caps."""
    # Imported here: reading settings must stay cheap (the CLI's lock check comes first).
    from pipelines.config import spec
    from pipelines.sources import common

    limits = common.Limits(cfg.sources.max_bytes, cfg.sources.max_decompressed_bytes)
    return spec.LoadContext(frozenset(cfg.telegram.operators), limits)


def declared_pipelines(cfg: Settings) -> list[str]:
    """The names the pipeline files declare (what a CLI lists while no bot runs), read
    through the data directory's cache so that unchanged files are not parsed again."""
    from pipelines.config import names

    cache = cfg.data_dir / names.CACHE_NAME if cfg.data_dir.is_dir() else None
    return names.declared(cfg.pipelines_dir, cache)


def store_config(cfg: Settings) -> db.StoreConfig:
    """The store's own configuration, from these settings."""
    return db.StoreConfig(
        data_dir=cfg.data_dir,
        synchronous=cfg.store.synchronous,
        wal_max_bytes=cfg.store.wal_max_mb * 1024 * 1024,
        retention=timedelta(days=cfg.store.retention_days),
        database_url=cfg.database_url.get_secret_value() if cfg.database_url else None,
        prepared_statements=cfg.store.prepared_statements,
    )


def deployment_secret(cfg: Settings) -> str | None:
    """What the deployment key is derived from: the buttons' secret when set, else the
    bot token (every worker of a deployment holds the same; None: neither is set)."""
    for held in (cfg.telegram.callback_secret, cfg.telegram.token):
        if held is not None and held.get_secret_value():
            return held.get_secret_value()
    return None
