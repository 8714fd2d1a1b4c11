"""The tells of a text under a set of rules, and the one line a card shows for them.

    rules = lint.Rules(builtin.RULES)           # compiled once per profile
    tells = lint.lint(draft, rules)
    for hit in tells.hits: hit.rule, hit.severity, hit.start, hit.end, hit.text, hit.hint
    lint.summary(tells)    # "✍️ 3 tells: delve · em dashes (5) · 'not just … but'" or ""

Time is linear in the text: every words rule is looked up in one pass over its words
(`pipelines.text.words`), patterns run on RE2, asked a few at a time in one alternation
first so that a text most patterns miss costs a few scans rather than one per pattern.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from pipelines.text import safe_regex, words
from pipelines.voice import builtin, counts
from pipelines.voice.rules import RANK, Rule, Severity

#: Patterns asked together in one alternation (as the filters do: past about this many,
#: RE2's DFA outgrows its memory and the NFA it falls back to is far slower).
ASKED_TOGETHER = 16
#: The longest matched text a hit keeps (a long sentence is cut, with "…").
MAX_SHOWN = 80
#: The group whose span a pattern's hit reports, when the pattern names one.
TELL_GROUP = "tell"


@dataclass(frozen=True)
class Hit:
    """One tell: which rule, how bad, where (character offsets into the text), what."""

    rule: str
    label: str
    severity: Severity
    start: int
    end: int
    text: str
    hint: str
    #: A count rule's figure (2.5 em dashes per 100 words); None for words and patterns.
    figure: float | None = None


@dataclass(frozen=True)
class Group:
    """The hits of one rule, as the card line names them."""

    label: str
    severity: Severity
    count: int

    def __str__(self) -> str:
        return f"{self.label} ({self.count})" if self.count > 1 else self.label


@dataclass(frozen=True)
class Tells:
    """Every hit, in text order."""

    hits: tuple[Hit, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.hits)

    @property
    def blocked(self) -> bool:
        return any(hit.severity == "block" for hit in self.hits)

    def groups(self) -> list[Group]:
        """One per rule hit: worst first, then in the order they first appear."""
        first: dict[str, Hit] = {}
        seen: dict[str, int] = {}
        for hit in self.hits:
            first.setdefault(hit.rule, hit)
            seen[hit.rule] = seen.get(hit.rule, 0) + 1
        ordered = sorted(first.values(), key=lambda hit: (RANK[hit.severity], hit.start))
        return [Group(hit.label, hit.severity, seen[hit.rule]) for hit in ordered]


def summary(tells: Tells) -> str:
    """The card's line: `✍️ 3 tells: delve · em dashes (5) · 'not just … but'`; "" for none."""
    groups = tells.groups()
    if not groups:
        return ""
    noun = "tell" if len(groups) == 1 else "tells"
    return f"✍️ {len(groups)} {noun}: " + " · ".join(str(group) for group in groups)


class Rules:
    """A list of rules compiled for `lint`; names must be unique."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self.by_name = {rule.name: rule for rule in self.rules}
        names = [rule.name for rule in self.rules]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"rule names must be unique: {', '.join(twice)} given twice")
        self._index = words.Index()
        alone: list[int] = []
        grouped: list[int] = []
        for key, rule in enumerate(self.rules):
            for word in rule.words:
                self._index.add(key, word)
            if rule.pattern is not None:
                # A named group cannot be repeated in an alternation: such a rule runs alone.
                compiled = safe_regex.compile(rule.pattern)
                (alone if compiled.groupindex else grouped).append(key)
        together = [
            (_together([self.rules[k] for k in chunk]), chunk)
            for chunk in _chunks(grouped, ASKED_TOGETHER)
        ]
        self._asked = [(None, [key]) for key in alone] + together
        self._counted = [key for key, rule in enumerate(self.rules) if rule.metric is not None]

    def __len__(self) -> int:
        return len(self.rules)

    def find(self, text: str) -> list[Hit]:
        hits: list[Hit] = []
        if self._index:
            for key, start, end in self._index.find_all(words.Text(text)):
                hits.append(_hit(self.rules[key], text, start, end))
        for together, keys in self._asked:
            if together is not None and together.search(text) is None:
                continue
            for key in keys:
                hits.extend(_pattern_hits(self.rules[key], text))
        if self._counted:
            figures = counts.measure(text)
            for key in self._counted:
                hits.extend(_count_hits(self.rules[key], text, figures))
        return hits


@functools.cache
def default_rules() -> Rules:
    """The built-in rules, compiled once."""
    return Rules(builtin.RULES)


def lint(text: str, rules: Rules | None = None) -> Tells:
    """The tells of `text` under `rules` (default: the built-in ones), in text order."""
    found = sorted((rules or default_rules()).find(text), key=lambda hit: (hit.start, -hit.end))
    # One rule's words may overlap ("let's dive", "dive in"): the first of them counts.
    reached: dict[str, int] = {}
    kept = []
    for hit in found:
        if hit.start >= reached.get(hit.rule, 0):
            kept.append(hit)
            reached[hit.rule] = hit.end
    return Tells(tuple(kept))


def _chunks(keys: list[int], size: int) -> list[list[int]]:
    return [keys[at : at + size] for at in range(0, len(keys), size)]


def _together(rules: list[Rule]) -> safe_regex.Pattern | None:
    """One alternation of the rules' patterns; None (ask each) when RE2 refuses it."""
    try:
        return safe_regex.compile("|".join(f"(?:{rule.pattern})" for rule in rules))
    except safe_regex.Unsupported:
        return None


def _pattern_hits(rule: Rule, text: str) -> list[Hit]:
    assert rule.pattern is not None
    compiled = safe_regex.compile(rule.pattern)
    group = compiled.groupindex.get(TELL_GROUP, 0)
    hits = []
    for found in compiled.finditer(text):
        start, end = found.span(group)
        if start < 0:  # the tell group took no part in this match: the whole match
            start, end = found.span()
        if end > start:
            hits.append(_hit(rule, text, start, end))
    return hits


def _count_hits(rule: Rule, text: str, figures: counts.Figures) -> list[Hit]:
    assert rule.metric is not None and rule.limit is not None
    figure = figures.value(rule.metric)
    if figure <= rule.limit:
        return []
    return [_hit(rule, text, start, end, figure) for start, end in figures.spans(rule.metric)]


def _hit(rule: Rule, text: str, start: int, end: int, figure: float | None = None) -> Hit:
    shown = text[start:end]
    if len(shown) > MAX_SHOWN:
        shown = shown[: MAX_SHOWN - 1] + "…"
    return Hit(rule.name, rule.shown, rule.severity, start, end, shown, rule.hint, figure)
