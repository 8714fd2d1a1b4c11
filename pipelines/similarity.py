"""Near-duplicate detection for the duplicate gate (pure; the store supplies the candidates).

Two items are duplicates when their normalized text is identical, or when the Jaccard
similarity of their source-id sets or of their word shingles is above `THRESHOLD`:

    earlier = [similarity.Earlier(item_id=7, text="...", sources=frozenset({"rss:a#1"}))]
    match = similarity.find_duplicate(text, frozenset({"rss:b#9"}), earlier)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

#: Above this Jaccard similarity two items count as the same story. 0.5 means more than
#: half of the combined shingles (or source ids) are shared: reworded headlines of one
#: story pass it, while two stories that merely share a topic stay well below it.
THRESHOLD = 0.5

#: Words per shingle. Three keeps word order meaningful without being brittle.
SHINGLE_WORDS = 3

_NON_WORD = re.compile(r"[\W_]+")


@dataclass(frozen=True)
class Earlier:
    """An item already drafted within the duplicate window."""

    item_id: int
    text: str
    sources: frozenset[str]


def normalize(text: str) -> str:
    """Case-folded NFKC text with punctuation dropped and whitespace collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NON_WORD.sub(" ", folded).split())


def shingles(text: str, k: int = SHINGLE_WORDS) -> frozenset[str]:
    """The set of k-word windows of the normalized text.

    A text shorter than k words is one shingle, so short titles still compare;
    an empty text has none.
    """
    if k < 1:
        raise ValueError(f"shingle size must be at least 1, got {k}")
    words = normalize(text).split()
    if len(words) <= k:
        return frozenset({" ".join(words)}) if words else frozenset()
    return frozenset(" ".join(words[i : i + k]) for i in range(len(words) - k + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Intersection size over union size; two empty sets share nothing, so 0.0."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def find_duplicate(
    candidate_text: str, candidate_sources: frozenset[str], earlier: Iterable[Earlier]
) -> Earlier | None:
    """The earlier item most similar to the candidate if it counts as a duplicate, else None.

    Ties go to the first one in `earlier`'s order.
    """
    text = normalize(candidate_text)
    words = shingles(candidate_text)
    best: Earlier | None = None
    best_score = 0.0
    for other in earlier:
        score = _score(text, words, candidate_sources, other)
        if score > THRESHOLD and score > best_score:
            best, best_score = other, score
    return best


def _score(text: str, words: frozenset[str], sources: frozenset[str], other: Earlier) -> float:
    if text and text == normalize(other.text):
        return 1.0
    return max(jaccard(sources, other.sources), jaccard(words, shingles(other.text)))
