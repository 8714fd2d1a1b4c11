"""Filters of thousands of rules: loading costs with the words, not the rules; the
verdicts, and the rule each names, are those one RE2 pattern per words rule gave; and a
long file of rules written out is not taken for a "billion laughs" file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipelines.config import filters, spec, yaml_file
from pipelines.text import safe_regex

#: How words rules were compiled before the index: one RE2 pattern per rule.
_EDGE = r"[^\pL\pN\pM_]"


def _escape(word: str) -> str:
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


def _one_pattern_per_rule(rules: list[dict[str, Any]], entry: dict[str, Any]) -> str | None:
    """The reason the filter gave when each words rule was its own RE2 pattern."""
    for number, rule in enumerate(rules, start=1):
        words = "|".join(_escape(word.strip()) for word in rule["words"])
        pattern = safe_regex.compile(f"(?i)(?:^|{_EDGE})(?:{words})(?:{_EDGE}|$)")
        fields = rule.get("field", ["title", "text"])
        for name in [fields] if isinstance(fields, str) else fields:
            text = filters.field_text(entry, name)
            found = pattern.search(text) if text else None
            if found is not None:
                matched = text[found.span()[0] : found.span()[1]]
                keep = [i for i, char in enumerate(matched) if char.isalnum() or char == "_"]
                shown = matched[keep[0] : keep[-1] + 1] if keep else matched
                described = filters.Rule.model_validate(rule).describe()
                return f"filter exclude #{number} ({described}) matched {shown[:60]!r} in {name}"
    return None


RULES: list[dict[str, Any]] = [
    {"words": ["new", "new york"]},
    {"words": ["york times", "York"]},
    {"words": ["c++", ".net", "#ad"]},
    {"words": ["🎁", "!!!"]},
    {"words": ["straße", "\u017ftar", "kelvin"], "field": ["text", "title"]},
    {"words": ["ΣΟΦΙΑ", "émeute", "e\u0301te\u0301"]},
    {"words": ["\u0131", "İstanbul", "naïve"]},
    {"words": ["public  transport", "a_b"], "field": "text"},
    {"words": ["don't", "e-mail"], "field": ["categories", "author"]},
]

TEXTS = [
    "New York", "the new  york times", "york\ttimes new", "NEWYORK", "asp.net and c++x",
    "why C++ again", "(.NET)", "x#ad", "#AD!", "a 🎁 gift", "gift🎁", "🎁🎁", "wow!!!", "!!!!",
    "DIE STRASSE", "die STRAẞE", "\u017fTAR", "STAR", "3 \u212aelvin", "σοφια", "σοφιας",
    "ΣΟΦΊΑ", "Une ÉMEUTE", "E\u0301TE\u0301 ici", "\u00e9t\u00e9", "I", "\u0131", "i\u0307stanbul",
    "İSTANBUL", "NAÏVE", "public\ntransport", "public\u00a0transport", "A_B", "a_bc",
    "DON'T", "don\u2019t", "E-Mail", "", "   ", "new" + "x" * 70, "x " * 40 + "new",
]  # fmt: skip


@pytest.mark.parametrize("text", TEXTS)
def test_the_index_gives_the_verdicts_of_one_pattern_per_rule(text: str) -> None:
    block = filters.FilterConfig.model_validate({"exclude": RULES})
    for entry in (
        {"title": text, "text": ""},
        {"title": "", "text": text},
        {"title": "x", "text": "y", "extra": {"author": text, "categories": [text, "z"]}},
        {"title": f"pre {text}", "text": f"{text} post"},
    ):
        assert block.verdict(entry).reason == _one_pattern_per_rule(RULES, entry)


def _many(count: int) -> list[dict[str, Any]]:
    return [{"words": [f"w{n}x"]} for n in range(count)]


def test_among_thousands_of_rules_the_first_that_matches_is_named() -> None:
    rules = _many(4500)
    rules[3000] = {"regex": "(?i)breaking"}
    include = [{"words": [f"i{n}y"]} for n in range(4500)]
    block = filters.FilterConfig.model_validate({"exclude": rules, "include": include})
    assert block.verdict({"title": "w4499x then W17X", "text": ""}).reason == (
        "filter exclude #18 (words [w17x]) matched 'W17X' in title"
    )
    assert block.verdict({"title": "BREAKING w4000x", "text": ""}).reason == (
        "filter exclude #3001 (regex '(?i)breaking') matched 'BREAKING' in title"
    )
    assert block.verdict({"title": "BREAKING w2999x", "text": ""}).reason == (
        "filter exclude #3000 (words [w2999x]) matched 'w2999x' in title"
    )
    assert block.verdict({"title": "w17", "text": "w17xy i4499"}).reason == (
        "filter include: no rule matched (words [i0y]; words [i1y]; words [i2y]; words [i3y];"
        " words [i4y]; and 4495 more rules)"
    )
    assert not block.verdict({"title": "weather", "text": "w9000x I4499Y"}).dropped


def _pipeline(rules: int) -> str:
    lines = [
        "name: many",
        "schedule: 15m",
        "sources:",
        "  - type: rss",
        "    url: http://127.0.0.1:1/feed.xml",
        "filter:",
        "  exclude:",
        *(f"    - words: [w{n}]" for n in range(rules)),
        "dispatch:",
        "  type: none",
    ]
    return "\n".join(lines) + "\n"


def test_ten_thousand_rules_written_out_load(tmp_path: Path) -> None:
    text = _pipeline(10_000)
    assert len(text.encode()) < yaml_file.MAX_FILE_BYTES
    (tmp_path / "many.yaml").write_text(text)
    result = spec.load_dir(tmp_path)
    assert result.errors == []
    block = result.pipelines["many"].filter
    assert block is not None and len(block.exclude) == 10_000
    assert filters.verdict(block, {"title": "news W9999", "text": ""}).reason == (
        "filter exclude #10000 (words [w9999]) matched 'W9999' in title"
    )


def test_a_few_aliases_over_many_rules_are_still_refused_naming_aliases(tmp_path: Path) -> None:
    # 200 rules written out, then 120 aliases of the whole list: 24,000 values more.
    text = _pipeline(200).replace("  exclude:", "  exclude: &all")
    text += "others:\n" + "".join("  - *all\n" for _ in range(120))
    (tmp_path / "laughs.yaml").write_text(text)
    [error] = spec.check(tmp_path)
    assert error.reason == (
        "its aliases (&anchor / *alias) expand to more than 20000 values beyond those"
        ' written out (a "billion laughs" file): write the values out'
    )
