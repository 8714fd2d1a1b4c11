"""The built-in tells, each against a text it must find and one it must leave alone; the
hits' spans and the card's one line; and the lint's time growing with the text alone."""

from __future__ import annotations

import time

import pytest

from pipelines.text import words
from pipelines.voice import builtin, lint
from pipelines.voice.rules import Rule

LONG = " ".join(["word"] * 40) + "."
#: Every built-in rule: (a text it must hit, a text it must not hit).
TABLE: dict[str, tuple[str, str]] = {
    "delve": ("Today we Delve into the budget.", "Today we read the budget, not the delivery."),
    "tapestry": ("A rich tapestry of cafés.", "Tapes, a trapeze and a tap."),
    "testament": ("The bridge is a testament to patience.", "He read the Old Testament."),
    "realm": ("Progress in the realm of buses.", "The realm's old coins."),
    "landscape": ("An ever-evolving scene.", "A landscape painting of the evolving hills."),
    "pivotal": ("A pivotal vote tonight.", "The pivot table was updated."),
    "game-changer": ("The tram is a game-changer.", "The game changed at half time."),
    "seamless": ("A seamless transfer.", "Seams split on the old sofa."),
    "unlock": ("Unleash the city's energy.", "The door was unlocked at nine."),
    "embark": ("The city will embark on a plan.", "Passengers embarked at the quay."),
    "bustling": ("A bustling market day.", "A busy market day."),
    "nestled": ("A café nestled by the river.", "A café by the river."),
    "heart-of": ("A shop in the heart of town.", "Heart surgery at the hospital."),
    "myriad": ("A plethora of options.", "Many options."),
    "stock-verbs": ("The report underscores the cost.", "The report shows the cost."),
    "worth-noting": (
        "It\u2019s worth noting that fares rise.",
        "Fares rise; noting that, we wait.",
    ),
    "navigate": ("Navigating the complexities of zoning.", "Navigating the river by boat."),
    "dive-in": ("Let\u2019s dive in.", "The diver jumped in."),
    "ai-disclosure": ("As an AI language model, I think.", "An AI model ranked the bids."),
    "fast-paced-world": ("In today's fast-paced world, buses.", "Today, the world saw buses."),
    "not-just-its": ("It's not just a park, it's a promise.", "It is a park and a promise."),
    "not-just-but": ("Not only buses but trams.", "Buses only. But trams too."),
    "in-summary": ("Fares rose. In conclusion, walk.", "The conclusion of the inquiry."),
    "rhetorical-opener": ("Ever wondered why buses bunch?", "Buses bunch; ever wondered? No."),
    "chatbot-opener": ("Certainly! Here is the post.", "The post is certainly late."),
    "em-dashes": ("Fares \u2014 again \u2014 rose.", "Fares \u2014 again, rose."),
    "exclamations": ("Wow! Fares rose!", "Fares rose!"),
    "emoji": ("Fares \U0001f68c\U0001f68c\U0001f68c\U0001f68c", "Fares \U0001f68c rose."),
    "hashtags": ("#a #b #c #d", "#a #b #c and issue #4"),
    "long-sentence": (LONG, "Short. " * 30),
    "sentence-length": (" ".join([LONG[:-1][:120] + "."] * 3), "Short one. Another."),
}


def _hit_names(text: str, rule: Rule) -> set[str]:
    return {hit.rule for hit in lint.lint(text, lint.Rules([rule])).hits}


def test_the_table_covers_every_built_in_rule() -> None:
    assert sorted(TABLE) == sorted(builtin.NAMES)


@pytest.mark.parametrize("rule", builtin.RULES, ids=builtin.NAMES)
def test_each_built_in_rule_hits_its_text_and_not_the_other(rule: Rule) -> None:
    hits, misses = TABLE[rule.name]
    assert _hit_names(hits, rule) == {rule.name}
    assert _hit_names(misses, rule) == set()


def test_every_rule_has_a_one_line_hint_and_a_severity() -> None:
    for rule in builtin.RULES:
        assert rule.hint and "\n" not in rule.hint and len(rule.hint) <= 100, rule.name
        assert rule.severity in ("note", "warn", "block")


def test_hits_carry_the_span_and_the_matched_text() -> None:
    text = "Fares rose. In summary, we delve."
    tells = lint.lint(text)
    spans = [(hit.rule, hit.start, hit.end, hit.text) for hit in tells.hits]
    assert spans == [("in-summary", 12, 22, "In summary"), ("delve", 27, 32, "delve")]
    assert all(text[h.start : h.end] == h.text for h in tells.hits)
    assert tells.hits[1].hint.startswith("Say what was looked at")


def test_the_card_line_names_each_rule_once_with_its_count() -> None:
    text = (
        "We delve \u2014 and \u2014 more \u2014 and \u2014 yes \u2014 now. "
        "It is not just buses but trams."
    )
    line = lint.summary(lint.lint(text))
    assert line == "✍️ 3 tells: delve · em dashes (5) · 'not just … but'"
    assert lint.summary(lint.lint("The council met on Tuesday.")) == ""
    assert lint.summary(lint.lint("We delve.")) == "✍️ 1 tell: delve"


def test_the_worst_tell_comes_first_and_a_block_is_blocked() -> None:
    tells = lint.lint("We delve. As an AI, I cannot say.")
    assert [group.label for group in tells.groups()] == ["chatbot words", "delve"]
    assert tells.blocked and not lint.lint("We delve.").blocked


def test_overlapping_words_of_one_rule_count_once_and_repeats_count_each() -> None:
    groups = lint.lint("Let's dive in. We delve, then delve again.").groups()
    assert [str(group) for group in groups] == ["delve (2)", "'dive in'"]


def test_a_rules_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="delve given twice"):
        lint.Rules([builtin.RULES[0], builtin.RULES[0]])


def test_a_pattern_rule_reports_its_tell_group_and_runs_on_re2() -> None:
    rule = Rule("catastrophic", "block", "x", pattern="(a+)+$")
    # Backtracking `re` would take minutes on this; RE2 answers in linear time.
    tells = lint.lint("a" * 50_000 + "!", lint.Rules([rule]))
    assert not tells
    named = Rule("named", "warn", "x", pattern=r"Mr\. (?P<tell>Smith)")
    assert [h.text for h in lint.lint("Mr. Smith", lint.Rules([named])).hits] == ["Smith"]


def test_find_all_gives_every_match_of_every_key() -> None:
    index = words.Index()
    index.add(1, "delve")
    index.add(2, "we delve")
    found = index.find_all(words.Text("We delve; they DELVE."))
    assert found == [(2, 0, 8), (1, 3, 8), (1, 15, 20)]


def test_the_time_grows_with_the_text_not_faster() -> None:
    rules = lint.default_rules()
    short, long = "We delve. " * 100, "We delve. " * 800

    def best(text: str) -> float:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            lint.lint(text, rules)
            times.append(time.perf_counter() - started)
        return min(times)

    # 8 times the text: well under 8 squared the time, whatever the machine's load.
    assert best(long) < best(short) * 24


def test_patterns_asked_together_still_report_each_rule_on_its_own() -> None:
    rules = [Rule(f"r{n}", "note", "x", pattern=rf"(?i)\bz{n}q\b") for n in range(40)]
    rules.append(Rule("upper", "note", "x", pattern="XYZ"))  # (?i) must not reach it
    compiled = lint.Rules(rules)
    found = lint.lint("Café: Z20Q and z37q, not xyz.", compiled)
    assert [(hit.rule, hit.start, hit.text) for hit in found.hits] == [
        ("r20", 6, "Z20Q"),  # a character offset: "é" is one, not two bytes
        ("r37", 15, "z37q"),
    ]
