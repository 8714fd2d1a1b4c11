"""Patterns on text an outsider controls run on RE2: a model's output cannot make them
slow, and a pattern RE2 cannot take is refused when the pipeline loads."""

from __future__ import annotations

import json

import pytest

from pipelines.text import safe_regex, validation


def test_a_pattern_is_compiled_once_and_searches_anywhere_in_the_text() -> None:
    assert safe_regex.search(r"\bbike\b", "new bike lanes")
    assert not safe_regex.search(r"^bike", "new bike lanes")
    assert safe_regex.compile("[a-z]+") is safe_regex.compile("[a-z]+")


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(?=a)b", "invalid perl operator: (?="),
        (r"(a)\1", r"invalid escape sequence: \1"),
        ("[a-", "missing ]: [a-"),
    ],
)
def test_a_pattern_re2_cannot_take_is_named_with_why(pattern: str, reason: str) -> None:
    with pytest.raises(safe_regex.Unsupported) as refused:
        safe_regex.compile(pattern)
    assert str(refused.value) == (
        f"pattern {pattern!r} cannot run on RE2 ({reason}); RE2 has no lookahead,"
        " lookbehind or backreferences: rewrite it without them"
    )


def test_an_output_schema_pattern_runs_on_re2() -> None:
    digits = {"type": "object", "properties": {"n": {"type": "string", "pattern": r"^\d+$"}}}
    validation.validate(json.dumps({"n": "2026"}), digits)
    # JSON Schema's \d is ASCII, as RE2's is; Python's re would take Arabic-Indic digits.
    with pytest.raises(validation.InvalidDraft, match=r"at n: '١٢٣' does not match"):
        validation.validate(json.dumps({"n": "١٢٣"}, ensure_ascii=False), digits)
    # Nested quantifiers backtrack for ever in Python's re; RE2 answers at once.
    nested = {"type": "string", "pattern": "^(a+)+$"}
    with pytest.raises(validation.InvalidDraft, match="does not match"):
        validation.validate(json.dumps("a" * 5_000 + "!"), nested)
    keys = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}
    with pytest.raises(validation.InvalidDraft, match="'Key1' does not match"):
        validation.validate(json.dumps({"ok": 1, "Key1": 2}), keys)


@pytest.mark.parametrize(
    ("schema", "reason"),
    [
        (
            {"properties": {"tag": {"pattern": "^(?!spam)"}}},
            "pattern '^(?!spam)' cannot run on RE2 (invalid perl operator: (?!); RE2 has no"
            " lookahead, lookbehind or backreferences: rewrite it without them"
            " (at properties/tag)",
        ),
        (
            {"patternProperties": {"^x-": {"type": "string"}}},
            "patternProperties is not supported: its patterns would not run on RE2;"
            " use propertyNames with a pattern, or name the properties",
        ),
    ],
)
def test_a_schema_whose_patterns_cannot_run_on_re2_is_refused(
    schema: dict[str, object], reason: str
) -> None:
    with pytest.raises(ValueError) as refused:
        validation.check_patterns(schema)
    assert str(refused.value) == reason
    validation.check_patterns({"properties": {"pattern": {"pattern": "^[a-z]+$"}}})
