"""The dispatch contract: deliveries, results, errors, retries and the target models.

The outbox worker calls `pipelines.dispatch.dispatch` once per delivery and decides
about retries:

    from pipelines import dispatch

    delivery = dispatch.Delivery.build(item_id=7, pipeline="news", version=2, attempt=1,
                                       text=draft_text, title=title, link=link, source=extra)
    try:
        result = await dispatch.dispatch(target, delivery, client=http_client, bot=bot)
    except dispatch.TransientDispatchError as error:
        # retry later, if attempts remain
        delay = max(dispatch.retry_delay(tries, rng), error.retry_after or 0.0)
    except dispatch.PermanentDispatchError:
        ...  # the item fails; the operator sees the message

`dispatch()` makes exactly one attempt. Every kind sends the delivery's
`idempotency_key` in a form its destination can dedupe on (an HTTP header, the
file name, the e-mail Message-ID), so a dispatch retried after a crash is seen
once by the destination, while a replay (a new attempt) is a new delivery.

The target models (`DispatchTarget`) are the `dispatch:` block of a pipeline's
config; the kinds live in `pipelines/dispatch/<kind>.py`.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pydantic

from pipelines.ground import paths, retry
from pipelines.text import redaction

if TYPE_CHECKING:  # types only: reading pipeline files loads no store
    from store.drafts import Draft
    from store.items import Item

#: How many times the outbox worker tries one delivery before the item fails.
MAX_ATTEMPTS = 6
#: The first retry waits about this long (seconds); each next one doubles it.
RETRY_BASE_SECONDS = 5.0
#: No retry waits longer than this (seconds): a destination down for long gets
#: retried every ten minutes or so until MAX_ATTEMPTS runs out.
RETRY_CAP_SECONDS = 600.0

# Pipeline names become parts of file names and keys: keep them to a safe alphabet.
_PIPELINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class DispatchError(Exception):
    """A delivery could not be carried out."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.__doc__)


class TransientDispatchError(DispatchError):
    """The destination failed this time; the same delivery may succeed later."""

    def __init__(self, message: str | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        #: Seconds the destination asked us to wait (HTTP Retry-After, Telegram RetryAfter).
        self.retry_after = retry_after


class PermanentDispatchError(DispatchError):
    """The destination refused the delivery or the target is misconfigured; retrying won't help."""


def idempotency_key(pipeline: str, item_id: int, attempt: int, version: int) -> str:
    """The key one delivery carries everywhere: the same for a retry, new for a replay."""
    check_pipeline_name(pipeline)
    parts = (pipeline, str(item_id), str(attempt), str(version))
    return "gh-" + hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def check_pipeline_name(pipeline: str) -> str:
    """Return `pipeline` if it is usable in file names and keys, else raise ValueError."""
    if not _PIPELINE_NAME.match(pipeline):
        raise ValueError(
            f"pipeline name {pipeline!r} is not valid: use letters, digits, '_', '.' and '-',"
            " starting with a letter or digit"
        )
    return pipeline


def retry_delay(attempt: int, rng: random.Random) -> float:
    """Seconds to wait after the `attempt`-th failed try (1-based): exponential, capped, jittered.

    Half the delay is fixed and half is drawn from `rng`, so retries of many
    deliveries spread out but none comes back immediately.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be 1 or more, got {attempt}")
    ceiling = retry.backoff_s(attempt, RETRY_BASE_SECONDS, RETRY_CAP_SECONDS)
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass(frozen=True)
class Delivery:
    """One approved draft on its way out; built by the outbox worker from the store's rows."""

    item_id: int
    pipeline: str
    version: int
    attempt: int
    text: str
    title: str
    link: str | None
    #: What the source kept about the item (e-mail: from, to, subject, message_id, references).
    source: dict[str, Any]
    idempotency_key: str
    #: The approved version's image (an http(s) URL), or None.
    image_url: str | None = None

    @classmethod
    def build(
        cls,
        *,
        item_id: int,
        pipeline: str,
        version: int,
        attempt: int,
        text: str,
        title: str,
        link: str | None = None,
        source: Mapping[str, Any] | None = None,
        image_url: str | None = None,
    ) -> Delivery:
        """A delivery whose idempotency key is derived from its identity."""
        key = idempotency_key(pipeline, item_id, attempt, version)
        source = dict(source or {})
        return cls(item_id, pipeline, version, attempt, text, title, link, source, key, image_url)

    @classmethod
    def of(cls, item: Item, draft: Draft, attempt: int) -> Delivery:
        """One draft version of `item`, with the title, link and source it was fetched with."""
        return cls.build(
            item_id=item.id,
            pipeline=item.pipeline,
            version=draft.version,
            attempt=attempt,
            text=draft.text,
            title=str(item.payload.get("title", "")),
            link=item.payload.get("link"),
            source=item.payload.get("extra") or {},
            image_url=draft.image_url,
        )


@dataclass(frozen=True)
class DispatchResult:
    """What the destination said: its id for the delivery where it gives one, and a summary."""

    external_id: str | None
    detail: str


class _Target(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class WebhookTarget(_Target):
    """POST the draft as JSON to a URL; header values "env:NAME" come from the environment."""

    type: Literal["webhook"]
    url: str
    headers: dict[str, str] = pydantic.Field(default_factory=dict)
    timeout: float = pydantic.Field(default=10.0, gt=0, le=300)

    @pydantic.field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        # urllib, not httpx: reading pipeline files (the CLI does) must not load the client.
        parsed = urllib.parse.urlsplit(url)  # ValueError for a malformed host or port
        if parsed.scheme not in ("http", "https") or not parsed.hostname or parsed.port == 0:
            raise ValueError("must be an http:// or https:// URL with a host")
        return url

    @pydantic.field_validator("headers")
    @classmethod
    def _valid_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not _HEADER_NAME.match(name):
                raise ValueError(f"header name {name!r} is not a valid HTTP header name")
            if name.lower() == "idempotency-key":
                raise ValueError("Idempotency-Key is set by gatehouse for every delivery")
            env = value.removeprefix("env:") if value.startswith("env:") else None
            if env is not None and not _ENV_NAME.match(env):
                raise ValueError(f"header {name}: 'env:' must be followed by a variable name")
        return headers


class FileTarget(_Target):
    """Write each draft as `<path>/<pipeline>-<item_id>-v<version>.md` with YAML front matter."""

    type: Literal["file"]
    #: Relative to the pipeline file, wherever gatehouse starts.
    path: paths.BesideFile


class SmtpTarget(_Target):
    """Send the draft as an e-mail reply to the item's original sender."""

    type: Literal["smtp"]
    host: str = pydantic.Field(min_length=1)
    port: int = pydantic.Field(default=587, ge=1, le=65535)
    username: str | None = None
    #: The name of the environment variable that holds the password (never the password).
    password_env: str | None = None
    from_addr: str
    starttls: bool = True
    timeout: float = pydantic.Field(default=30.0, gt=0, le=300)

    @pydantic.field_validator("password_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not _ENV_NAME.match(name):
            raise ValueError("must be an environment variable name such as SMTP_PASSWORD")
        return name

    @pydantic.field_validator("from_addr")
    @classmethod
    def _address(cls, addr: str) -> str:
        if "@" not in addr or any(c in addr for c in "\r\n"):
            raise ValueError("must be an e-mail address such as bot@example.org")
        return addr

    @pydantic.model_validator(mode="after")
    def _login_pair(self) -> SmtpTarget:
        if (self.username is None) != (self.password_env is None):
            raise ValueError("username and password_env go together: set both or neither")
        return self


class TelegramChannelTarget(_Target):
    """Post the draft to a Telegram channel the bot can write to."""

    type: Literal["telegram_channel"]
    #: A numeric chat id (channels are negative, -100...) or a public "@channelname".
    chat_id: int | str

    @pydantic.field_validator("chat_id")
    @classmethod
    def _chat(cls, chat_id: int | str) -> int | str:
        if isinstance(chat_id, str) and not re.fullmatch(r"@[A-Za-z][A-Za-z0-9_]{3,}", chat_id):
            raise ValueError("must be a numeric chat id or a public channel name like @mychannel")
        return chat_id


class NoneTarget(_Target):
    """Approval is the end of the line: nothing is sent anywhere."""

    type: Literal["none"]


DispatchTarget = Annotated[
    WebhookTarget | FileTarget | SmtpTarget | TelegramChannelTarget | NoneTarget,
    pydantic.Field(discriminator="type"),
]


def read_env(name: str, env: Mapping[str, str] | None, *, needed_for: str) -> str:
    """The value of environment variable `name`; a missing one is a config error."""
    value = (os.environ if env is None else env).get(name)
    if not value:
        raise PermanentDispatchError(f"{needed_for}: environment variable {name} is not set")
    redaction.remember(value)  # a password or a header's secret: never logged
    return value
