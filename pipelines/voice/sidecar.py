"""A draft version's tells as kept beside it (the sidecar of its row) and read back for
its card, its replay and the check before it goes out.

    kept = sidecar.of(lint.lint(text, rules))   # JSON-ready, None for a text without tells
    sidecar.line(kept)                          # "✍️ 2 tells: delve · em dashes (5)" or ""
    sidecar.blocked(kept)                       # a block tell: Approve asks first

A hit is kept as [rule, label, severity, start, end]: enough to mark it and to tell
whether a version's tells changed, a few dozen bytes each. The line and the block are
kept as the whole text gave them, so a draft past MAX_KEPT hits is still named in full.
"""

from __future__ import annotations

from typing import Any

from pipelines.voice import lint

#: The most hits a version keeps (a long draft full of em dashes): the card names rules,
#: not every place, and the row stays small.
MAX_KEPT = 200


def of(tells: lint.Tells) -> dict[str, Any] | None:
    """The sidecar of `tells`; None for a text without any."""
    if not tells:
        return None
    hits = [[h.rule, h.label, h.severity, h.start, h.end] for h in tells.hits[:MAX_KEPT]]
    line = lint.summary(tells)
    return {"line": line, "blocked": tells.blocked, "total": len(tells.hits), "hits": hits}


def line(kept: dict[str, Any] | None) -> str:
    """The card's one line for these tells; "" for none."""
    return str((kept or {}).get("line", ""))


def blocked(kept: dict[str, Any] | None) -> bool:
    return bool((kept or {}).get("blocked", False))
