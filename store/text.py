"""Text the store can keep: SQLite holds UTF-8, and a lone surrogate cannot be encoded.

JSON may carry one as an escape (`"\\ud800"`), so a feed or a model reply can hand
gatehouse a `str` that no transaction can write. Callers clean such text, or refuse it
with `unstorable`'s reason, before it reaches a write unit.

    text.clean("a\\ud800b")         # 'a\\ufffdb'
    text.unstorable("a\\ud800b")    # 'a lone surrogate U+D800 at character 1'
"""

from __future__ import annotations

import re

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def unstorable(value: str) -> str | None:
    """Why `value` cannot be stored as UTF-8, or None when it can."""
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
    """`value` with each lone surrogate replaced by U+FFFD (a valid pair is joined)."""
    if unstorable(value) is None:
        return value
    # Through UTF-16: a surrogate pair becomes its character, a lone half U+FFFD.
    return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
