"""What one provider call came to: a Completion, or a ProviderError saying whether it
may have been charged (pipelines/providers/client.py's docstring says what each means)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Completion:
    """A provider's reply; token counts are None when the provider did not report them."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    model: str
    request_id: str | None
    #: The parsed body, kept as evidence for the ledger and the operator.
    raw: dict[str, Any]
    #: Attempts made, this one included.
    attempts: int = 1
    #: Earlier attempts that got a 5xx from a provider that bills errors (bills_errors).
    uncertain_attempts: int = 0

    @property
    def usage_known(self) -> bool:
        """True when both token counts were reported, so the cost can be computed."""
        return self.input_tokens is not None and self.output_tokens is not None


class ProviderError(Exception):
    """The provider call failed."""

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int | None = None,
        attempts: int = 1,
        request_id: str | None = None,
    ) -> None:
        self.message = message or (self.__doc__ or "").strip()
        self.status = status
        self.attempts = attempts
        self.request_id = request_id
        super().__init__(self.message)


class ProviderNotCalled(ProviderError):
    """The provider ran no generation and charged nothing, so the hold can be released."""


class ProviderRejected(ProviderNotCalled):
    """The provider refused the request with a definitive 4xx before generating anything."""


class ProviderErrorAnswer(ProviderNotCalled):
    """The provider answered with an HTTP error and no usage: nothing was charged."""


class ProviderUncertain(ProviderError):
    """The request reached the provider and may have been charged."""


class ProviderBadOutput(ProviderError):
    """The provider answered 2xx, and so charged, but the body could not be used."""

    def __init__(self, message: str | None = None, *, raw_text: str = "", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.raw_text = raw_text


class ProviderTooLarge(ProviderError):
    """The provider answered 2xx, and so charged, with a reply larger than max_reply_bytes."""
