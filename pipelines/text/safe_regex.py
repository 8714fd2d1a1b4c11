"""Regular expressions for text an outsider controls (model output, fetched items), on
Google's RE2: matching takes time linear in the text, whatever the pattern, where
Python's `re` backtracks (`(a+)+$` on forty a's and a "!" takes minutes).

    pattern = safe_regex.compile(r"^[A-Z]{2}-\\d+$")   # Unsupported names what RE2 refuses
    if pattern.search(text): ...

RE2 has no lookaround and no backreferences; a pattern that needs them is refused
when the configuration is loaded, never at match time. Compiled patterns are cached.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Protocol, cast

import re2

#: Compiled patterns kept; a configuration holds a few dozen at most.
CACHE_SIZE = 512


class Match(Protocol):
    def span(self, group: int = 0) -> tuple[int, int]: ...


class Pattern(Protocol):
    """What callers use of a compiled RE2 pattern."""

    @property
    def groupindex(self) -> Mapping[str, int]: ...

    def search(self, text: str) -> Match | None: ...

    def finditer(self, text: str) -> Iterator[Match]: ...


class Unsupported(ValueError):
    """A pattern RE2 cannot run; the message names it and why."""


@functools.lru_cache(maxsize=CACHE_SIZE)
def compile(pattern: str) -> Pattern:
    """`pattern` compiled by RE2, or Unsupported saying what RE2 could not take."""
    options = re2.Options()
    options.log_errors = False  # RE2 would print each refusal to stderr itself
    try:
        return cast(Pattern, re2.compile(pattern, options))
    except re2.error as exc:
        said = exc.args[0] if exc.args else exc
        reason = said.decode(errors="replace") if isinstance(said, bytes) else str(said)
        raise Unsupported(
            f"pattern {pattern!r} cannot run on RE2 ({reason}); RE2 has no lookahead,"
            " lookbehind or backreferences: rewrite it without them"
        ) from None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches anywhere in `text` (compiled once, then cached)."""
    return compile(pattern).search(text) is not None
