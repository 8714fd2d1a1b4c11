"""Words for a phone screen: states as words, plurals, bars (times and money: store.units).

    wording.state("awaiting_approval")          # "waiting for approval"
    wording.plural(1, "run")                     # "1 run"; plural(2, "run") "2 runs"
    wording.bar(0.62)                            # "▓▓▓░░"

Pure functions; nothing reads the clock.
"""

from __future__ import annotations

#: Every item state in words an operator reads at a glance.
STATES = {
    "new": "new",
    "drafting": "drafting",
    "awaiting_approval": "waiting for approval",
    "approved": "approved",
    "dispatching": "sending",
    "dispatched": "sent",
    "rejected": "rejected",
    "expired": "expired",
    "failed": "failed",
    "breach": "stuck (past its SLA)",
    "filtered": "filtered out",
}
#: Cells in a budget bar: five fit any phone line beside the figures.
BAR_CELLS = 5
#: Words whose plural is not "+s".
_IRREGULAR = {"breach": "breaches", "is": "are", "was": "were"}


def state(value: object) -> str:
    text = str(getattr(value, "value", value))
    return STATES.get(text, text.replace("_", " "))


def plural(count: int, word: str) -> str:
    """ "1 run", "2 runs", "0 breaches"."""
    return f"{count} {word if count == 1 else _IRREGULAR.get(word, word + 's')}"


def bar(share: float) -> str:
    """▓ for each fifth used (rounded), ░ for the rest; over 100% stays full."""
    filled = min(BAR_CELLS, max(0, round(share * BAR_CELLS)))
    return "▓" * filled + "░" * (BAR_CELLS - filled)
