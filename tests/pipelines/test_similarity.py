"""The duplicate gate's pure part: normalization, shingles, Jaccard, and the gate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.text import similarity
from pipelines.text.similarity import Earlier

STORY = (
    "The city council approved the new bike lane plan on Tuesday after a long debate "
    "about parking spaces along the main street."
)
REWORDED = (
    "The city council approved the new bike lane plan on Tuesday after a long debate "
    "about parking along the main street, officials said."
)
OTHER_STORY = (
    "A local bakery won the regional bread contest with a sourdough recipe passed down "
    "through three generations of the family."
)


def test_normalize_folds_case_punctuation_width_and_space() -> None:
    messy = "  Hello,\tWORLD!!  \uff46\uff55\uff4c\uff4c\u2014width_x "  # full-width "full"
    assert similarity.normalize(messy) == "hello world full width x"


def test_shingles() -> None:
    assert similarity.shingles("a b c d") == frozenset({"a b c", "b c d"})
    assert similarity.shingles("Breaking: news") == frozenset({"breaking news"})
    assert similarity.shingles("  ... ") == frozenset()
    with pytest.raises(ValueError, match="at least 1"):
        similarity.shingles("a", k=0)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({"x", "y"}, {"x", "y"}, 1.0),
        ({"x", "y"}, {"y", "z"}, 1 / 3),
        ({"x"}, {"y"}, 0.0),
        (set(), set(), 0.0),
    ],
)
def test_jaccard(a: set[str], b: set[str], expected: float) -> None:
    assert similarity.jaccard(frozenset(a), frozenset(b)) == pytest.approx(expected)


def earlier(item_id: int, text: str, *sources: str) -> Earlier:
    return Earlier(item_id=item_id, text=text, sources=frozenset(sources))


@pytest.mark.parametrize(
    ("text", "sources", "expected_id"),
    [
        # identical after normalization, even from an unrelated source
        (STORY.upper().replace(",", ""), {"rss:other#1"}, 1),
        # reworded: most shingles shared
        (REWORDED, {"rss:other#1"}, 1),
        # same source ids (the same entry seen through two feeds), different text
        ("Totally different wording", {"rss:a#1", "rss:b#1"}, 1),
        # unrelated story, unrelated source
        (OTHER_STORY, {"rss:c#3"}, None),
        # a shared topic word is not enough
        ("City council meets Tuesday", {"rss:c#4"}, None),
        # one of three sources shared: 1/3 is not above the threshold
        ("Something else", {"rss:a#1", "rss:z#9"}, None),
        # empty text never matches empty text
        ("", set(), None),
    ],
)
def test_find_duplicate(text: str, sources: set[str], expected_id: int | None) -> None:
    seen = [earlier(1, STORY, "rss:a#1", "rss:b#1"), earlier(2, "", "rss:q#0")]
    found = similarity.Gate(seen).find(text, frozenset(sources))
    assert (found.item_id if found else None) == expected_id


def test_find_duplicate_prefers_the_closest_match() -> None:
    seen = [earlier(1, REWORDED, "rss:x#1"), earlier(2, STORY, "rss:y#2")]
    found = similarity.Gate(seen).find(STORY, frozenset({"rss:z#3"}))
    assert found is not None and found.item_id == 2


def test_threshold_is_exclusive() -> None:
    # Exactly half shared: two of four sources in common, so not a duplicate.
    seen = [earlier(1, "alpha", "s1", "s2", "s3")]
    assert similarity.Gate(seen).find("beta", frozenset({"s1", "s2", "s4"})) is None
    assert similarity.THRESHOLD == 0.5


def brute_force(text: str, sources: frozenset[str], seen: list[Earlier]) -> Earlier | None:
    """The gate's definition, pair by pair: what the indexed Gate must always agree with."""
    best, best_score = None, 0.0
    for other in seen:
        same = similarity.normalize(text) and similarity.normalize(text) == similarity.normalize(
            other.text
        )
        score = (
            1.0
            if same
            else max(
                similarity.jaccard(sources, other.sources),
                similarity.jaccard(similarity.shingles(text), similarity.shingles(other.text)),
            )
        )
        if score > similarity.THRESHOLD and score > best_score:
            best, best_score = other, score
    return best


# A small vocabulary so that random texts overlap often, near the threshold and across it.
WORDS = st.sampled_from(["city", "council", "bike", "lane", "vote", "the", "a", "main", "rain"])
TEXTS = st.lists(WORDS, max_size=12).map(" ".join)
SOURCES = st.frozensets(st.sampled_from(["s1", "s2", "s3", "s4"]), max_size=3)


@given(
    seen=st.lists(st.tuples(TEXTS, SOURCES), max_size=12),
    text=TEXTS,
    sources=SOURCES,
)
@settings(max_examples=400, deadline=None)
def test_gate_agrees_with_the_pairwise_definition(
    seen: list[tuple[str, frozenset[str]]], text: str, sources: frozenset[str]
) -> None:
    earlier_items = [Earlier(n, t, s) for n, (t, s) in enumerate(seen)]
    gate = similarity.Gate(earlier_items)
    assert gate.find(text, sources) == brute_force(text, sources, earlier_items)


def test_gate_scores_only_reachable_drafts_and_still_finds_the_reworded_one() -> None:
    unrelated = [
        earlier(n, f"{OTHER_STORY} edition {n} of {n * 7}", f"rss:u#{n}") for n in range(50)
    ]
    gate = similarity.Gate([*unrelated, earlier(99, STORY, "rss:a#1")])
    found = gate.find(REWORDED, frozenset({"rss:new#1"}))
    assert found is not None and found.item_id == 99
    assert len(gate) == 51
    # Only the reworded story's draft (index 50) is scored, not the fifty unrelated ones.
    assert gate._reachable(similarity.fingerprint(REWORDED), frozenset()) == {50}
