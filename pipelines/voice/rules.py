"""One tells rule: words, an RE2 pattern or a count, with a name, a severity and a hint.

    rules.Rule("delve", "warn", "Say what you looked at.", words=("delve", "delves"))
    rules.Rule("em-dashes", "warn", "Use commas.", metric="em_dashes", limit=1.0)

A rule is plain data; `lint.compile` turns a list of them into what runs. Each rule has
exactly one kind: `words` (whole words or phrases in any case), `pattern` (RE2; a group
named `tell` narrows the span reported) or `metric` with its `limit` (a tell when the
text's figure is over it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

Severity = Literal["note", "warn", "block"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
#: Worst first: the order tells are shown in.
RANK = {"block": 0, "warn": 1, "note": 2}

Metric = Literal[
    "em_dashes", "exclamations", "emoji", "hashtags", "sentence_words", "mean_sentence_words"
]
METRICS: tuple[Metric, ...] = get_args(Metric)
#: What each metric's limit is measured in, for hints and errors.
UNITS: dict[Metric, str] = {
    "em_dashes": "em dashes per 100 words",
    "exclamations": "exclamation marks",
    "emoji": "emoji",
    "hashtags": "hashtags",
    "sentence_words": "words in the longest sentence",
    "mean_sentence_words": "words per sentence on average",
}


@dataclass(frozen=True)
class Rule:
    """One rule. `label` is how the card names it (default: the name)."""

    name: str
    severity: Severity
    hint: str
    words: tuple[str, ...] = ()
    pattern: str | None = None
    metric: Metric | None = None
    limit: float | None = None
    label: str | None = None

    def __post_init__(self) -> None:
        kinds = sum((bool(self.words), self.pattern is not None, self.metric is not None))
        if kinds != 1:
            raise ValueError(f"rule {self.name!r}: give exactly one of words, pattern, metric")
        if (self.metric is None) != (self.limit is None):
            raise ValueError(f"rule {self.name!r}: a metric and its limit go together")

    @property
    def shown(self) -> str:
        return self.label or self.name

    @property
    def kind(self) -> str:
        return "words" if self.words else "pattern" if self.pattern is not None else "count"

    def tuned(
        self,
        severity: Severity | None = None,
        hint: str | None = None,
        limit: float | None = None,
        label: str | None = None,
    ) -> Rule:
        """This rule with the given parts changed (None: kept)."""
        if limit is not None and self.metric is None:
            raise ValueError(f"rule {self.name!r} is not a count: it has no limit to tune")
        return replace(
            self,
            severity=severity or self.severity,
            hint=hint or self.hint,
            limit=self.limit if limit is None else limit,
            label=label or self.label,
        )
