"""Which provider and model to call, and how: the `llm` settings of gatehouse."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

#: The largest reply read from a provider (bytes, on the wire and decompressed): a draft
#: of a few thousand tokens is tens of KB of JSON, so 1 MiB leaves ample room.
DEFAULT_MAX_REPLY_BYTES = 1024 * 1024
#: How much of a reply's text is kept in the ledger's outputs (characters), at most.
#: At least a draft's longest (validation.MAX_DRAFT_CHARS), so a usable draft is kept
#: whole; only an unusable reply is cut.
DEFAULT_MAX_KEPT_CHARS = 40_000
MIN_KEPT_CHARS = 20_000
#: The ceiling of drafts (and triage questions) of one model in flight at once in one
#: process; below it, the number follows what the provider states (providers/pace.py).
#: The rest wait their turn before anything is held for them.
DEFAULT_MAX_CONCURRENT_CALLS = 16

#: The providers' own API hosts; any OpenAI-compatible server can stand in via base_url.
DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}


class ProviderSettings(BaseModel):
    """How to reach one provider and model; the key is a SecretStr and never printed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["openai", "anthropic"]
    #: Empty or absent: the default for `kind`.
    base_url: str = ""
    api_key: SecretStr
    model: str = Field(min_length=1)
    timeout_s: float = Field(default=60, gt=0)
    connect_timeout_s: float = Field(default=10, gt=0)
    max_retries: int = Field(default=4, ge=0)
    max_retry_wait_s: float = Field(default=60, ge=0)
    max_reply_bytes: int = Field(default=DEFAULT_MAX_REPLY_BYTES, ge=1024)
    max_kept_chars: int = Field(default=DEFAULT_MAX_KEPT_CHARS, ge=MIN_KEPT_CHARS)
    max_concurrent_calls: int = Field(default=DEFAULT_MAX_CONCURRENT_CALLS, ge=1, le=256)
    anthropic_version: str = "2023-06-01"
    #: Whether the provider bills a call it answered with a 5xx error. False (the norm for
    #: the synchronous APIs gatehouse speaks): such an answer settles at zero and the item
    #: asks again at its next run. True: the call may have been charged, so its claim is
    #: uncertain until reconciled, as after a timeout.
    bills_errors: bool = False

    @model_validator(mode="before")
    @classmethod
    def _default_base_url(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("base_url"):
            default = DEFAULT_BASE_URLS.get(str(data.get("kind")))
            if default is not None:
                return {**data, "base_url": default}
        return data

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://, e.g. https://api.openai.com/v1")
        return value.rstrip("/")
