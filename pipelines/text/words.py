"""Whole words in any case, looked up in one pass over a text however many words are
listed: the text is cut into its word runs once and each run is looked up in a dict, so
loading costs in proportion to the words and matching in proportion to the text.

    index = words.Index()
    index.add(7, "sponsored")                   # key 7: the caller's own number
    index.add(8, "public transport")            # a space: any run of whitespace
    text = words.Text("A SPONSORED post")
    index.find(text)                             # {7: (2, 11)}: where each key first matched

It finds exactly what one RE2 pattern per word would, which is what filters compiled
before (`(?i)(?:^|E)word(?:E|$)`, E any character but a letter, a digit, a combining mark
or "_", a space in the word `\\s+`): the same Unicode case folding (simple, as RE2's
`(?i)`), the same edges, and per key the leftmost match, ties to the word added first.
One RE2 pattern per word cost 6 ms and 330 kB (each edge is a class of every Unicode
letter); 4,500 of them took a `gatehouse check` 28 s and 1.6 GB.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

#: RE2's `\s`, which a space in a word stood for: ASCII whitespace only.
_SPACE = frozenset(" \t\n\f\r")
#: Characters remembered per table; past it a text's rare characters are mapped each
#: time (a feed could send every code point, and the tables must not grow with them).
_KEPT = 20_000
#: A run of anything but the space that stands for every edge in `Text.words`. Python's
#: `re` is safe here: one class, repeated, cannot backtrack.
_RUN = re.compile(r"[^ ]+")


@functools.lru_cache(maxsize=4096)
def _is_word(char: str) -> bool:
    r"""What RE2's `[\pL\pN\pM_]` takes: a letter, a digit, a combining mark or "_"."""
    return char == "_" or unicodedata.category(char)[0] in "LNM"


def _fold_char(char: str) -> str:
    folded = char.casefold()  # the simple folding where Unicode has one...
    if len(folded) != 1:  # ...else ß→ss is full folding, which RE2's (?i) does not do
        lower = char.lower()
        folded = lower if len(lower) == 1 else char
    return folded


class _Table(dict[int, str]):
    """`str.translate`'s table: each character to one member of its case class, and
    with `edges`, every character but a word character to a space."""

    def __init__(self, edges: bool) -> None:
        super().__init__()
        self.edges = edges

    def __missing__(self, code: int) -> str:
        char = chr(code)
        mapped = " " if self.edges and not _is_word(char) else _fold_char(char)
        if len(self) < _KEPT:
            self[code] = mapped
        return mapped


_FOLDS = _Table(edges=False)
_WORDS = _Table(edges=True)


def fold(text: str) -> str:
    """`text` with each character replaced by one member of its case class (the length
    stays, so positions in it are positions in `text`)."""
    return text.lower() if text.isascii() else text.translate(_FOLDS)


class Text:
    """One text, folded and cut into word runs once for every index that reads it."""

    def __init__(self, text: str) -> None:
        self.text = text
        # Word characters folded, every other character a space: its runs are the
        # text's words, at their places in the text.
        self.words = text.translate(_WORDS)
        self.tokens = frozenset(self.words.split())
        self._folded: str | None = None

    @property
    def folded(self) -> str:
        if self._folded is None:
            self._folded = fold(self.text)
        return self._folded

    def runs(self) -> list[tuple[int, int]]:
        return [match.span() for match in _RUN.finditer(self.words)]

    def edge_before(self, start: int) -> bool:
        return start == 0 or not _is_word(self.text[start - 1])

    def end_of(self, chunks: tuple[str, ...], start: int) -> int | None:
        """Where `chunks` (separated by whitespace) end when they start at `start` and
        are followed by an edge, or None."""
        folded, at = self.folded, start
        for number, chunk in enumerate(chunks):
            if number:
                gap = at
                while gap < len(folded) and folded[gap] in _SPACE:
                    gap += 1
                if gap == at:
                    return None
                at = gap
            if not folded.startswith(chunk, at):
                return None
            at += len(chunk)
        if at < len(folded) and _is_word(folded[at]):
            return None
        return at


@dataclass(frozen=True)
class _Word:
    key: int
    order: int  # added n-th: breaks a tie between two words at one place
    chunks: tuple[str, ...]  # folded, as split at whitespace


class Index:
    """Words under keys; `find` says where each key's words first match a text."""

    def __init__(self) -> None:
        # A word that starts with a word character starts at a run of the text: looked
        # up by that run. One that starts otherwise ("#ad", "🎁") by its first character.
        self._by_run: dict[str, list[_Word]] = {}
        self._by_char: dict[str, list[_Word]] = {}
        self._count = 0

    def __bool__(self) -> bool:
        return self._count > 0

    def add(self, key: int, word: str) -> None:
        chunks = tuple(fold(word).split())
        if not chunks:
            raise ValueError("a word must have a character other than whitespace")
        entry = _Word(key, self._count, chunks)
        self._count += 1
        head = chunks[0]
        if _is_word(head[0]):
            first_run = head.translate(_WORDS).split(" ", 1)[0]
            self._by_run.setdefault(first_run, []).append(entry)
        else:
            self._by_char.setdefault(head[0], []).append(entry)

    def find(self, text: Text) -> dict[int, tuple[int, int]]:
        """Per key that matches, the span of its leftmost match (ties: the word added
        first), the edges around it not included."""
        best: dict[int, tuple[int, int, int]] = {}  # key: (start, order, end)
        if not self._by_run.keys().isdisjoint(text.tokens):  # most texts: no word at all
            for start, end in text.runs():
                for word in self._by_run.get(text.words[start:end], ()):
                    _keep(best, word, start, text.end_of(word.chunks, start))
        for char, listed in self._by_char.items():
            start = text.folded.find(char)
            while start != -1:
                if text.edge_before(start):
                    for word in listed:
                        _keep(best, word, start, text.end_of(word.chunks, start))
                start = text.folded.find(char, start + 1)
        return {key: (start, end) for key, (start, _, end) in best.items()}

    def find_all(self, text: Text) -> list[tuple[int, int, int]]:
        """Every match as (key, start, end), left to right: what `find` gives per key,
        and every later match too (the voice tells count each "delve")."""
        found: dict[tuple[int, int], tuple[int, int]] = {}  # (key, start): (order, end)
        if not self._by_run.keys().isdisjoint(text.tokens):
            for start, end in text.runs():
                for word in self._by_run.get(text.words[start:end], ()):
                    _keep_all(found, word, start, text.end_of(word.chunks, start))
        for char, listed in self._by_char.items():
            start = text.folded.find(char)
            while start != -1:
                if text.edge_before(start):
                    for word in listed:
                        _keep_all(found, word, start, text.end_of(word.chunks, start))
                start = text.folded.find(char, start + 1)
        hits = [(key, start, end) for (key, start), (_, end) in found.items()]
        return sorted(hits, key=lambda hit: (hit[1], hit[0]))


def _keep(best: dict[int, tuple[int, int, int]], word: _Word, start: int, end: int | None) -> None:
    if end is None:
        return
    found = (start, word.order, end)
    if word.key not in best or found < best[word.key]:
        best[word.key] = found


def _keep_all(
    found: dict[tuple[int, int], tuple[int, int]], word: _Word, start: int, end: int | None
) -> None:
    # At one place a key is found once, by the word added first (as in `find`).
    if end is not None and found.get((word.key, start), (word.order + 1,))[0] > word.order:
        found[(word.key, start)] = (word.order, end)
