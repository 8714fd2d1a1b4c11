"""Text the store can keep, in either backend: SQLite holds UTF-8, so a lone surrogate
cannot be encoded; PostgreSQL's text cannot hold NUL (U+0000) at all.

JSON may carry either as an escape (`"\\ud800"`, `"\\u0000"`), so a feed, a model reply or
a caller can hand gatehouse a `str` that no transaction can write (NUL only on
PostgreSQL, which would make the same input fail on one backend and pass on the
other). Callers clean such text, or refuse it with `unstorable`'s reason, before it
reaches a write unit.

    text.clean("a\\ud800b")         # 'a\\ufffdb'
    text.unstorable("a\\ud800b")    # 'a lone surrogate U+D800 at character 1'
    text.unstorable("a\\x00b")      # 'a NUL character (U+0000) at character 1'
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def unstorable(value: str) -> str | None:
    """Why `value` cannot be stored (as UTF-8, and in PostgreSQL), or None when it can."""
    if (nul := value.find("\x00")) >= 0:
        return f"a NUL character (U+0000) at character {nul}"
    if value.isascii():
        return None
    try:
        value.encode()
    except UnicodeEncodeError:
        found = _LONE_SURROGATE.search(value)
        where = found.start() if found else 0
        return f"a lone surrogate U+{ord(value[where]):04X} at character {where}"
    return None


def clean(value: str) -> str:
    """`value` with each lone surrogate and each NUL replaced by U+FFFD (a valid
    surrogate pair is joined)."""
    if unstorable(value) is None:
        return value
    value = value.replace("\x00", "\ufffd")
    # Through UTF-16: a surrogate pair becomes its character, a lone half U+FFFD.
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
