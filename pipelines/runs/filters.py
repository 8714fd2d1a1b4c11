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

Exclude wins over include: an entry matching both is dropped by its exclude rule. Each
list first asks, per field, alternations of up to ASKED_TOGETHER of its rules whether any
rule matches at all (most entries match none): a few passes over each field instead of
one per rule, and the rules themselves run one by one only on an entry that did. Every
pattern, the words' included, runs on RE2 (`pipelines.text.safe_regex`), never on
Python's `re`: a rule's time is linear in the entry's length whatever it says. A pattern
RE2 cannot compile, an unknown field and an empty rule are refused when the file loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from pipelines.text import safe_regex

FieldName = Literal["title", "text", "link", "author", "categories"]
FIELDS: tuple[str, ...] = get_args(FieldName)
#: Where a rule looks when it names no field.
DEFAULT_FIELDS: tuple[FieldName, ...] = ("title", "text")
#: A word's edges: anything but a letter, a digit, a combining mark or "_" (RE2's `\b`
#: knows only ASCII letters, so "émeute" would have an edge inside it).
_EDGE = r"[^\pL\pN\pM_]"
#: Characters of the matched text kept in an event, at most.
MAX_MATCH_SHOWN = 60
#: Rules asked together in one pattern. RE2 answers an alternation in one pass while its
#: DFA fits its memory; 50 words rules (each edge a class of every Unicode letter) outgrow
#: it and RE2 falls back to its NFA, which costs an entry hundreds of times more.
ASKED_TOGETHER = 16


def _escape(word: str) -> str:
    """`word` as an RE2 literal: letters and digits as they are, a run of spaces as any
    whitespace, anything else by its code point (so no character is ever syntax)."""
    parts = []
    for char in word:
        if char.isalnum():
            parts.append(char)
        elif char.isspace():
            if not parts or parts[-1] != r"\s+":
                parts.append(r"\s+")
        else:
            parts.append(f"\\x{{{ord(char):x}}}")
    return "".join(parts)


class Rule(BaseModel):
    """One rule: `words` (whole words, any case) or `regex` (RE2), over some fields."""

    model_config = ConfigDict(extra="forbid")

    words: list[str] | None = None
    regex: str | None = None
    field: list[FieldName] = Field(default_factory=lambda: list(DEFAULT_FIELDS))

    _pattern: safe_regex.Pattern | None = PrivateAttr(default=None)
    _source: str = PrivateAttr(default="")

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
        if self.words is not None:
            alternatives = "|".join(_escape(word) for word in self.words)
            self._source = f"(?i)(?:^|{_EDGE})(?:{alternatives})(?:{_EDGE}|$)"
        else:
            self._source = str(self.regex)
        self._pattern = safe_regex.compile(self._source)
        return self

    @property
    def source(self) -> str:
        """The RE2 pattern this rule runs."""
        return self._source

    def describe(self) -> str:
        # As written in the file (a repr would double every backslash).
        what = f"words [{', '.join(self.words)}]" if self.words else f"regex '{self.regex}'"
        if tuple(self.field) == DEFAULT_FIELDS:
            return what
        return f"{what} in {', '.join(self.field)}"

    def find(self, payload: dict[str, Any]) -> str | None:
        """Where this rule matches the entry (`"Sponsored" in title`), or None."""
        assert self._pattern is not None  # set by _one_kind
        for name in self.field:
            text = field_text(payload, name)
            found = self._pattern.search(text) if text else None
            if found is not None:
                start, end = found.span()
                shown = _trimmed(text[start:end]) if self.words else text[start:end]
                return f"{shown[:MAX_MATCH_SHOWN]!r} in {name}"
        return None


def _trimmed(text: str) -> str:
    """A words match without the edge characters around it."""
    keep = [i for i, char in enumerate(text) if char.isalnum() or char == "_"]
    return text[keep[0] : keep[-1] + 1] if keep else text


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
    """Per field, patterns that match where any of `rules` reading that field does (None:
    too large for RE2 together; the rules then run one by one, with the same verdicts)."""
    combined: Together = {}
    for name in FIELDS:
        sources = [rule.source for rule in rules if name in rule.field]
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


class FilterConfig(BaseModel):
    """`exclude`: any match drops the entry; `include`: when listed, one must match."""

    model_config = ConfigDict(extra="forbid")

    exclude: list[Rule] = Field(default_factory=list)
    include: list[Rule] = Field(default_factory=list)

    _any_exclude: Together = PrivateAttr(default_factory=dict)
    _any_include: Together = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _some_rules(self) -> FilterConfig:
        if not self.exclude and not self.include:
            raise ValueError("filter has no rules: list some under exclude: or include:")
        self._any_exclude = _any_of(self.exclude)
        self._any_include = _any_of(self.include)
        return self

    def verdict(self, payload: dict[str, Any]) -> Verdict:
        if self.exclude and _any_match(self._any_exclude, self.exclude, payload):
            for number, rule in enumerate(self.exclude, start=1):
                if (where := rule.find(payload)) is not None:
                    return Verdict(f"filter exclude #{number} ({rule.describe()}) matched {where}")
        if self.include and not _any_match(self._any_include, self.include, payload):
            listed = "; ".join(rule.describe() for rule in self.include)
            return Verdict(f"filter include: no rule matched ({listed})")
        return KEPT


def _any_match(combined: Together, rules: list[Rule], payload: dict[str, Any]) -> bool:
    """Whether any of `rules` matches the entry: rules asked together per field when RE2
    could take them so, else rule by rule."""
    if None in combined.values():
        return any(rule.find(payload) is not None for rule in rules)
    for name, patterns in combined.items():
        text = field_text(payload, name)
        if text and any(pattern.search(text) is not None for pattern in patterns or ()):
            return True
    return False


def verdict(config: FilterConfig | None, payload: dict[str, Any]) -> Verdict:
    """The entry's verdict under a pipeline's filter (none: every entry is kept)."""
    return KEPT if config is None else config.verdict(payload)
