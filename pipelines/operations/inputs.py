"""Checks on what the operator typed: ids, pipeline names; `Invalid` says what is valid."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence

from store import errors

#: The largest row id SQLite stores (a signed 64-bit integer); item and claim ids are below.
MAX_ID = 2**63 - 1


class Invalid(errors.Refused, ValueError):
    """An argument is not valid; the message says what is."""


def whole_number(value: object, what: str, low: int = 1, high: int = MAX_ID) -> int:
    """`value` (text such as "12" or "#12", or a JSON integer) as an int from `low` to
    `high`; Invalid otherwise. Only ASCII digits count: str.isdigit() also accepts "²",
    which int() refuses."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        text = value.strip().removeprefix("#")
        if text.isascii() and text.isdigit() and len(text) <= len(str(high)):
            number = int(text)
    if number is None or not low <= number <= high:
        shown = repr(value)[:24]
        raise Invalid(f"{what} must be a whole number from {low} to {high}, not {shown}")
    return number


def check_pipeline(
    name: str, known: Collection[str], broken: Mapping[str, Sequence[object]] | None = None
) -> str:
    """`name` if it is configured; Invalid with close matches and the valid names otherwise,
    or with the errors of its file when `broken` (name -> errors) says it failed to load."""
    if name in known:
        return name
    if broken and name in broken:
        errors = "\n".join(f"  {error}" for error in broken[name])
        raise Invalid(
            f"pipeline {name!r} did not load: its file has errors (gatehouse check lists"
            f" every file's):\n{errors}"
        )
    close = difflib.get_close_matches(name, sorted(known), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    valid = ", ".join(sorted(known)) or "none configured"
    raise Invalid(f"unknown pipeline {name!r}.{hint} Pipelines: {valid}")
