"""A rewrite's prompt (the instruction, the voice's sentences, each tell with its hint,
the draft), the card's line comparing it with the draft, and the facts it lost."""

from __future__ import annotations

from pipelines.voice import lint, rewrite

DRAFT = "We delve into the budget. In today's fast-paced world, buses matter."
FACTS = (
    "The Riverside Gazette reports 12 new buses. Mayor Ana Ruiz said they cost 3.5m: "
    "see https://example.org/buses. Then the council rose."
)


def test_the_prompt_holds_the_instruction_the_style_each_tell_and_the_draft() -> None:
    tells = lint.lint(DRAFT)
    asked = rewrite.prompt(DRAFT, tells, ["Short sentences.", "Numbers as digits."])
    assert asked.startswith(rewrite.INSTRUCTION)
    assert "The channel's voice:\n- Short sentences.\n- Numbers as digits." in asked
    assert len(tells.hits) == 2
    for hit in tells.hits:
        assert f'- {hit.label}: "{hit.text}" ({hit.hint})' in asked
    assert asked.endswith(f"Draft:\n{DRAFT}")


def test_a_prompt_without_style_or_tells_has_neither_section() -> None:
    asked = rewrite.prompt("Buses run.", lint.lint("Buses run."), [])
    assert "voice:" not in asked and "notice" not in asked
    assert asked == f"{rewrite.INSTRUCTION}\n\nDraft:\nBuses run."


def test_a_rule_hit_often_is_listed_once_with_how_often() -> None:
    text = "We delve. " * 7
    asked = rewrite.prompt(text, lint.lint(text), [])
    assert asked.count("- delve") == 1 and '- delve (7 times): "delve"' in asked


def test_the_line_compares_tells_and_length() -> None:
    after = "Buses matter."
    line = rewrite.compared(DRAFT, lint.lint(DRAFT), after, lint.lint(after))
    assert line == f"rewrite: 2 tells → 0, {len(DRAFT)} → {len(after)} characters"
    one = "We delve."
    assert rewrite.compared(one, lint.lint(one), one, lint.lint(one)).startswith(
        "rewrite: 1 tell → 1,"
    )


def test_lost_names_numbers_and_links_the_rewrite_dropped_in_the_drafts_order() -> None:
    kept_some = "Riverside has 12 new buses, Ana Ruiz said. The council rose."
    assert rewrite.lost(FACTS, kept_some) == [
        "Riverside Gazette",
        "3.5",
        "https://example.org/buses",
    ]
    assert rewrite.lost(FACTS, FACTS) == []
    # A capitalised word that opens a sentence is not a name; "Then" is never asked for.
    assert "Then" not in rewrite.lost(FACTS, "")
    assert "Mayor" not in rewrite.lost(FACTS, "")


def test_added_names_rules_the_rewrite_hit_that_the_draft_did_not() -> None:
    plain = "Buses run on time."
    worse = "Buses run on time. A bustling market day."
    assert rewrite.added(lint.lint(plain), lint.lint(worse)) == ["bustling"]
    assert rewrite.added(lint.lint(worse), lint.lint(plain)) == []
