"""Near-duplicate detection for the duplicate gate (pure; the store supplies the candidates).

Two items are duplicates when their normalized text is identical, or when the Jaccard
similarity of their source-id sets or of their word shingles is above `THRESHOLD`:

    gate = similarity.Gate([similarity.Earlier(7, "...", frozenset({"rss:a#1"}))])
    match = gate.find(text, frozenset({"rss:b#9"}))      # an Earlier, or None

A `Gate` fingerprints each earlier draft once and indexes it, so checking one candidate
looks only at the earlier drafts that could reach the threshold, not at all of them.
Building it and checking against it are CPU work: the engine runs both in a thread.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
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


@dataclass(frozen=True)
class Fingerprint:
    """What the gate compares: the normalized text and its shingles."""

    normalized: str
    shingles: frozenset[str]


def normalize(text: str) -> str:
    """Case-folded NFKC text with punctuation dropped and whitespace collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_NON_WORD.sub(" ", folded).split())


def shingles(text: str, k: int = SHINGLE_WORDS) -> frozenset[str]:
    """The set of k-word windows of the normalized text.

    A text shorter than k words is one shingle, so short titles still compare;
    an empty text has none.
    """
    return _shingles(normalize(text), k)


def fingerprint(text: str) -> Fingerprint:
    normalized = normalize(text)
    return Fingerprint(normalized, _shingles(normalized, SHINGLE_WORDS))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Intersection size over union size; two empty sets share nothing, so 0.0."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


class Gate:
    """Earlier drafts, fingerprinted once and indexed for `find`. Read-only once built.

    Shingles are indexed by prefix filtering: with every shingle ranked rarest first,
    two sets whose Jaccard similarity is at least t share a shingle within the first
    `n - ceil(t * n) + 1` of each (n the set's size). Only the earlier drafts found
    through those prefixes, their source ids or their exact text are scored, exactly as
    before; a draft sharing none of them cannot be above the threshold.
    """

    def __init__(self, earlier: Iterable[Earlier]) -> None:
        self.earlier = list(earlier)
        self._prints = [fingerprint(other.text) for other in self.earlier]
        self._counts = Counter(token for each in self._prints for token in each.shingles)
        self._by_text: dict[str, int] = {}
        self._by_source: dict[str, list[int]] = {}
        self._by_prefix: dict[str, list[int]] = {}
        for index, (other, each) in enumerate(zip(self.earlier, self._prints, strict=True)):
            if each.normalized:
                self._by_text.setdefault(each.normalized, index)
            for source in other.sources:
                self._by_source.setdefault(source, []).append(index)
            for token in self._prefix(each.shingles):
                self._by_prefix.setdefault(token, []).append(index)

    def __len__(self) -> int:
        return len(self.earlier)

    def find(self, text: str, sources: frozenset[str]) -> Earlier | None:
        """The earlier item most similar to the candidate if it counts as a duplicate.

        Ties go to the first one in `earlier`'s order.
        """
        candidate = fingerprint(text)
        best: Earlier | None = None
        best_score = 0.0
        for index in sorted(self._reachable(candidate, sources)):
            score = self._score(candidate, sources, index)
            if score > THRESHOLD and score > best_score:
                best, best_score = self.earlier[index], score
        return best

    def _reachable(self, candidate: Fingerprint, sources: frozenset[str]) -> set[int]:
        """Every earlier draft whose score could pass the threshold (and a few more)."""
        found: set[int] = set()
        same_text = self._by_text.get(candidate.normalized) if candidate.normalized else None
        if same_text is not None:
            found.add(same_text)
        for source in sources:
            found.update(self._by_source.get(source, ()))
        for token in self._prefix(candidate.shingles):
            found.update(self._by_prefix.get(token, ()))
        return found

    def _prefix(self, shingles: frozenset[str]) -> list[str]:
        """Those of the first n - ceil(THRESHOLD * n) + 1 of n shingles that the earlier
        drafts use, in one total order for both sides: rarest among the earlier drafts
        first (so a shingle they never use comes before all), ties by the text itself."""
        known = sorted(sorted(shingles & self._counts.keys()), key=self._counts.__getitem__)
        unknown = len(shingles) - len(known)
        keep = len(shingles) - math.ceil(THRESHOLD * len(shingles)) + 1 - unknown
        return known[: max(keep, 0)]

    def _score(self, candidate: Fingerprint, sources: frozenset[str], index: int) -> float:
        other = self._prints[index]
        if candidate.normalized and candidate.normalized == other.normalized:
            return 1.0
        return max(
            jaccard(sources, self.earlier[index].sources),
            jaccard(candidate.shingles, other.shingles),
        )


def _shingles(normalized: str, k: int) -> frozenset[str]:
    if k < 1:
        raise ValueError(f"shingle size must be at least 1, got {k}")
    words = normalized.split()
    if len(words) <= k:
        return frozenset({" ".join(words)}) if words else frozenset()
    # zip over k shifted copies (stopping at the shortest, the last window): the windows
    # are built in C, not one slice at a time.
    return frozenset(map(" ".join, zip(*(words[i:] for i in range(k)), strict=False)))
