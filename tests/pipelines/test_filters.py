"""The filter's matcher: words (Unicode, any case, whole words), RE2 regexes, fields, and
exclude over include; and what `gatehouse check` says of a bad rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pipelines.config import filters, spec


def _entry(title: str = "", text: str = "", **extra: Any) -> dict[str, Any]:
    link = extra.pop("link", None)
    return {"title": title, "text": text, "link": link, "published": None, "extra": extra}


def _filter(**block: Any) -> filters.FilterConfig:
    return filters.FilterConfig.model_validate(block)


@pytest.mark.parametrize(
    ("words", "title", "dropped"),
    [
        (["sponsored"], "A Sponsored post", True),
        (["sponsored"], "SPONSORED", True),
        (["sponsored"], "sponsoredcontent today", False),
        (["sponsored"], "unsponsored news", False),
        (["sponsored"], "(sponsored)", True),
        (["sponsored"], "sponsored_by", False),
        (["émeute"], "Une ÉMEUTE éclate", True),
        (["émeute"], "des émeutes", False),
        (["straße"], "Die STRAẞE ist zu", True),
        (["tram"], "Трамвай tram-line", True),
        (["трамвай"], "Новый ТРАМВАЙ", True),
        (["трамвай"], "трамвайный парк", False),
        (["public transport"], "Public   transport news", True),
        (["c++"], "why C++ again", True),
        (["a.b"], "aXb", False),
        (["東京"], "東京 news", True),
        (["cat", "dog"], "hot dog stand", True),
    ],
)
def test_words_are_whole_words_in_any_case(words: list[str], title: str, dropped: bool) -> None:
    verdict = _filter(exclude=[{"words": words}]).verdict(_entry(title))
    assert verdict.dropped is dropped


@pytest.mark.parametrize(
    ("regex", "title", "dropped"),
    [
        (r"(?i)\bpodcast\b", "Our PODCAST, episode 4", True),
        (r"(?i)\bpodcast\b", "podcasting tips", False),
        (r"^\[ad\]", "[ad] buy now", True),
        (r"^\[ad\]", "no [ad] here", False),
        (r"\d{4}-\d{2}", "report 2026-12", True),
    ],
)
def test_regex_runs_as_written(regex: str, title: str, dropped: bool) -> None:
    assert _filter(exclude=[{"regex": regex}]).verdict(_entry(title)).dropped is dropped


@pytest.mark.parametrize(
    ("field", "entry", "dropped"),
    [
        (None, _entry("x", "a giveaway inside"), True),
        (None, _entry("x", "y", link="https://giveaway.example"), False),
        ("title", _entry("x", "a giveaway inside"), False),
        ("text", _entry("x", "a giveaway inside"), True),
        ("link", _entry("x", "y", link="https://giveaway.example/a"), True),
        ("author", _entry("x", "y", author="Giveaway Bot"), True),
        ("author", _entry("x", "y"), False),
        ("categories", _entry("x", "y", categories=["News", "Giveaway"]), True),
        (["title", "categories"], _entry("giveaway", "y"), True),
    ],
)
def test_fields(field: object, entry: dict[str, Any], dropped: bool) -> None:
    rule: dict[str, Any] = {"words": ["giveaway"]} | ({} if field is None else {"field": field})
    assert _filter(exclude=[rule]).verdict(entry).dropped is dropped


SPONSORED = "filter exclude #1 (words [sponsored])"


@pytest.mark.parametrize(
    ("title", "reason"),
    [
        ("new tram line", None),
        ("sponsored tram line", f"{SPONSORED} matched 'sponsored' in title"),
        ("weather today", "filter include: no rule matched (words [tram, bus])"),
        ("sponsored weather", f"{SPONSORED} matched 'sponsored' in title"),
        (
            "Bus podcast",
            "filter exclude #2 (regex '(?i)podcast' in title) matched 'podcast' in title",
        ),
    ],
)
def test_exclude_wins_over_include_and_the_reason_names_the_rule(
    title: str, reason: str | None
) -> None:
    block = _filter(
        exclude=[{"words": ["sponsored"]}, {"regex": "(?i)podcast", "field": "title"}],
        include=[{"words": ["tram", "bus"]}],
    )
    assert block.verdict(_entry(title)).reason == reason


def test_no_filter_keeps_everything() -> None:
    assert filters.verdict(None, _entry("sponsored")) == filters.KEPT


def test_catastrophic_pattern_is_linear_on_re2() -> None:
    # On Python's re this takes longer than the test's timeout; RE2 answers at once.
    block = _filter(exclude=[{"regex": "(a+)+$"}])
    assert block.verdict(_entry("a" * 100_000 + "!")).dropped is False


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        ({}, "empty rule: give it words: [a, b]"),
        ({"words": []}, "words must list at least one non-empty word"),
        ({"words": ["  "]}, "words must list at least one non-empty word"),
        ({"regex": ""}, "regex is empty"),
        ({"regex": "(?<=a)b"}, "cannot run on RE2"),
        ({"words": ["a"], "regex": "b"}, "words or regex, not both"),
        ({"words": ["a"], "field": "body"}, "unknown field 'body': a filter reads title, text"),
        ({"words": ["a"], "colour": "red"}, "colour"),
    ],
)
def test_bad_rules_are_refused(rule: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError, match=said.replace("[", r"\[").replace("(", r"\(")):
        _filter(exclude=[rule])


BAD = """\
name: city
schedule: 15m
sources:
  - type: rss
    url: http://127.0.0.1:1/feed.xml
filter:
  exclude:
    - words: [sponsored]
    - regex: '(a)\\1'
    - words: [x]
      field: body
    - {}
dispatch:
  type: file
  path: out
"""


def test_check_names_file_line_and_fix(tmp_path: Path) -> None:
    (tmp_path / "city.yaml").write_text(BAD)
    found = [str(error) for error in spec.check(tmp_path)]
    file = tmp_path / "city.yaml"
    assert found == [
        f"{file}:9: filter.exclude.1.regex: pattern '(a)\\\\1' cannot run on RE2 (invalid escape"
        " sequence: \\1); RE2 has no lookahead, lookbehind or backreferences: rewrite it"
        " without them",
        f"{file}:11: filter.exclude.2.field: unknown field 'body': a filter reads title, text,"
        " link, author, categories (default: title and text)",
        f"{file}:12: filter.exclude.3: empty rule: give it words: [a, b] (whole words, any"
        " case) or regex: '...' (RE2)",
    ]


def test_the_one_pass_shortcut_gives_the_rules_own_verdicts() -> None:
    """Each list first asks the alternation of its regex rules per field; without it (RE2
    could not take them together) the rules run one by one: the verdicts are the same."""
    rules = {
        "exclude": [{"words": ["sponsored"]}, {"regex": "^ad:", "field": "title"}],
        "include": [{"words": ["tram"]}, {"regex": "bus$", "field": ["text", "link"]}],
    }
    fast = _filter(**rules)
    slow = _filter(**rules)
    slow._exclude.any_regex = dict.fromkeys(slow._exclude.any_regex)
    slow._include.any_regex = dict.fromkeys(slow._include.any_regex)
    entries = [
        _entry("tram news"), _entry("ad: tram"), _entry("x", "take the bus"),
        _entry("x", "y", link="https://e.org/bus"), _entry("sponsored tram"), _entry("weather"),
        _entry("x", "ad: tram"), _entry("sponsored", "bus"),
    ]  # fmt: skip
    found = [fast.verdict(entry) for entry in entries]
    assert found == [slow.verdict(entry) for entry in entries]
    assert [v.dropped for v in found] == [False, True, False, False, True, True, False, True]
