"""A pipeline's `filter:` block: which fetched entries are dropped before anything is
drafted or paid for, and the rule that dropped each one.

    filter:
      exclude:                          # any match drops the entry
        - words: [sponsored, giveaway]  # whole words, any case, Unicode-aware
        - regex: '(?i)\\bpodcast\\b'     # RE2
          field: title                  # title, text, link, author, categories
      include:                          # when present, an entry must match one of these
        - words: [tram, bus]

    verdict = pipeline.filter.verdict(payload)   # payload as items store it
    if verdict.dropped: ...verdict.reason       # names the rule and what it matched

Exclude wins over include: an entry matching both is dropped by its exclude rule. The
words of all a list's rules sit in one index per field (`pipelines.text.words`): a field
is cut into its words once and each is looked up, so neither loading nor matching grows
with the number of words rules. Regex rules run on RE2 (`pipelines.text.safe_regex`),
never on Python's `re`, first asked together per field in alternations of up to
ASKED_TOGETHER rules (most entries match none), then one by one on an entry that did: a
rule's time is linear in the entry's length whatever it says. A pattern RE2 cannot
compile, an unknown field and an empty rule are refused when the file loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from pipelines.text import safe_regex, words

FieldName = Literal["title", "text", "link", "author", "categories"]
FIELDS: tuple[str, ...] = get_args(FieldName)
#: Where a rule looks when it names no field.
DEFAULT_FIELDS: tuple[FieldName, ...] = ("title", "text")
#: Characters of the matched text kept in an event, at most.
MAX_MATCH_SHOWN = 60
#: Include rules a reason names before saying how many more there are.
INCLUDE_LISTED = 5
#: Regex rules asked together in one pattern. RE2 answers an alternation in one pass
#: while its DFA fits its memory; past that it falls back to its NFA, which costs an
#: entry hundreds of times more.
ASKED_TOGETHER = 16


class Rule(BaseModel):
    """One rule: `words` (whole words, any case) or `regex` (RE2), over some fields."""

    model_config = ConfigDict(extra="forbid")

    words: list[str] | None = None
    regex: str | None = None
    field: list[FieldName] = Field(default_factory=lambda: list(DEFAULT_FIELDS))

    _pattern: safe_regex.Pattern | None = PrivateAttr(default=None)  # a regex rule's

    @field_validator("field", mode="before")
    @classmethod
    def _fields(cls, value: object) -> object:
        listed = [value] if isinstance(value, str) else value
        if not isinstance(listed, list) or not listed:
            raise ValueError(f"field must be one of {', '.join(FIELDS)}, or a list of them")
        for name in listed:
            if name not in FIELDS:
                raise ValueError(
                    f"unknown field {name!r}: a filter reads {', '.join(FIELDS)}"
                    " (default: title and text)"
                )
        return listed

    @field_validator("words", mode="after")
    @classmethod
    def _words(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        words = [word.strip() for word in value]
        if not words or not all(words):
            raise ValueError(
                "words must list at least one non-empty word, like words: [sponsored, giveaway]"
            )
        return words

    @field_validator("regex", mode="after")
    @classmethod
    def _regex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value:
            raise ValueError("regex is empty, which matches every entry: write a pattern")
        try:
            safe_regex.compile(value)
        except safe_regex.Unsupported as exc:
            raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> Rule:
        if self.words is None and self.regex is None:
            raise ValueError(
                "empty rule: give it words: [a, b] (whole words, any case) or regex: '...' (RE2)"
            )
        if self.words is not None and self.regex is not None:
            raise ValueError("a rule has words or regex, not both: make them two rules")
        if self.regex is not None:
            self._pattern = safe_regex.compile(self.regex)
        return self

    def describe(self) -> str:
        # As written in the file (a repr would double every backslash).
        what = f"words [{', '.join(self.words)}]" if self.words else f"regex '{self.regex}'"
        if tuple(self.field) == DEFAULT_FIELDS:
            return what
        return f"{what} in {', '.join(self.field)}"

    def find(self, payload: dict[str, Any]) -> str | None:
        """Where this regex rule matches the entry (`"Sponsored" in title`), or None."""
        assert self._pattern is not None  # a words rule is looked up in its list's index
        for name in self.field:
            text = field_text(payload, name)
            found = self._pattern.search(text) if text else None
            if found is not None:
                start, end = found.span()
                return f"{text[start:end][:MAX_MATCH_SHOWN]!r} in {name}"
        return None


def _shown(text: str, start: int, end: int) -> str:
    """A words match as events have always shown it: with the edge characters on either
    side taken in, then trimmed to its first and last letter, digit or "_"."""
    around = text[max(start - 1, 0) : min(end + 1, len(text))]
    keep = [i for i, char in enumerate(around) if char.isalnum() or char == "_"]
    return around[keep[0] : keep[-1] + 1] if keep else around


def field_text(payload: dict[str, Any], name: str) -> str:
    """One field of a stored entry as text: author and categories come from the
    source's extras (categories one per line)."""
    extra = payload.get("extra")
    extra = extra if isinstance(extra, dict) else {}
    value = payload.get(name) if name in ("title", "text", "link") else extra.get(name)
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(str(part) for part in value)
    return str(value)


@dataclass(frozen=True)
class Verdict:
    """Whether an entry goes on; `reason` names the rule that dropped it (None: kept)."""

    reason: str | None = None

    @property
    def dropped(self) -> bool:
        return self.reason is not None


KEPT = Verdict()


Together = dict[str, list[safe_regex.Pattern] | None]


def _any_of(rules: list[Rule]) -> Together:
    """Per field, patterns that match where any of the regex `rules` reading that field
    does (None: too large for RE2 together; the rules then run one by one)."""
    combined: Together = {}
    for name in FIELDS:
        sources = [str(rule.regex) for rule in rules if name in rule.field]
        if not sources:
            continue
        groups = [sources[n : n + ASKED_TOGETHER] for n in range(0, len(sources), ASKED_TOGETHER)]
        try:
            combined[name] = [
                safe_regex.compile("|".join(f"(?:{s})" for s in group)) for group in groups
            ]
        except safe_regex.Unsupported:
            combined[name] = None
    return combined


Texts = dict[str, words.Text]


class _Rules:
    """One list of rules, ready to ask: its words in one index per field (keyed by the
    rule's place in the list), its regexes asked together first."""

    def __init__(self, rules: list[Rule]) -> None:
        self.rules = rules
        self.regexes = [rule for rule in rules if rule.regex is not None]
        self.any_regex = _any_of(self.regexes)
        self.words: dict[str, words.Index] = {}
        for place, rule in enumerate(rules):
            for word in rule.words or ():
                for name in rule.field:
                    self.words.setdefault(name, words.Index()).add(place, word)

    def _word_hits(self, payload: dict[str, Any], texts: Texts) -> dict[str, dict[int, Span]]:
        hits = {}
        for name, index in self.words.items():
            if name not in texts:
                texts[name] = words.Text(field_text(payload, name))
            hits[name] = index.find(texts[name])
        return hits

    def _any_regex(self, payload: dict[str, Any]) -> bool:
        if None in self.any_regex.values():
            return any(rule.find(payload) is not None for rule in self.regexes)
        for name, patterns in self.any_regex.items():
            text = field_text(payload, name)
            if text and any(pattern.search(text) is not None for pattern in patterns or ()):
                return True
        return False

    def any(self, payload: dict[str, Any], texts: Texts) -> bool:
        """Whether any rule of the list matches the entry."""
        hits = self._word_hits(payload, texts)
        return any(hits.values()) or (bool(self.regexes) and self._any_regex(payload))

    def first(self, payload: dict[str, Any], texts: Texts) -> tuple[int, str] | None:
        """The first rule of the list that matches (its number from 1) and where."""
        hits = self._word_hits(payload, texts)
        worded = min((place for found in hits.values() for place in found), default=None)
        if self.regexes and self._any_regex(payload):
            for place, rule in enumerate(self.rules):
                if worded is not None and place >= worded:
                    break
                if rule.regex is not None and (where := rule.find(payload)) is not None:
                    return place + 1, where
        if worded is None:
            return None
        for name in self.rules[worded].field:
            if (span := hits[name].get(worded)) is not None:
                shown = _shown(texts[name].text, *span)
                return worded + 1, f"{shown[:MAX_MATCH_SHOWN]!r} in {name}"
        raise AssertionError("a hit is in one of its rule's fields")  # pragma: no cover


Span = tuple[int, int]


class FilterConfig(BaseModel):
    """`exclude`: any match drops the entry; `include`: when listed, one must match."""

    model_config = ConfigDict(extra="forbid")

    exclude: list[Rule] = Field(default_factory=list)
    include: list[Rule] = Field(default_factory=list)

    _exclude: _Rules = PrivateAttr()
    _include: _Rules = PrivateAttr()

    @model_validator(mode="after")
    def _some_rules(self) -> FilterConfig:
        if not self.exclude and not self.include:
            raise ValueError("filter has no rules: list some under exclude: or include:")
        self._exclude = _Rules(self.exclude)
        self._include = _Rules(self.include)
        return self

    def verdict(self, payload: dict[str, Any]) -> Verdict:
        texts: Texts = {}  # each field folded and cut into words once, for both lists
        if self.exclude and (found := self._exclude.first(payload, texts)) is not None:
            number, where = found
            rule = self.exclude[number - 1]
            return Verdict(f"filter exclude #{number} ({rule.describe()}) matched {where}")
        if self.include and not self._include.any(payload, texts):
            return Verdict(f"filter include: no rule matched ({_listed(self.include)})")
        return KEPT


def _listed(rules: list[Rule]) -> str:
    """The include rules as a reason names them: the first INCLUDE_LISTED, then how many
    more (an event per dropped entry must not hold a list of thousands)."""
    listed = "; ".join(rule.describe() for rule in rules[:INCLUDE_LISTED])
    more = len(rules) - INCLUDE_LISTED
    return f"{listed}; and {more} more rules" if more > 0 else listed


def verdict(config: FilterConfig | None, payload: dict[str, Any]) -> Verdict:
    """The entry's verdict under a pipeline's filter (none: every entry is kept)."""
    return KEPT if config is None else config.verdict(payload)
