"""The figures of a text the count rules read: em dashes per 100 words, exclamation marks,
emoji, hashtags, and sentence lengths in words, each with the spans it counted.

    figures = counts.measure("Big news! Really — big.")
    figures.value("em_dashes"), figures.spans("em_dashes")    # 1.0, [(17, 18)]

Python's `re` is safe here: each pattern is one character class, repeated or not, which
cannot backtrack; a voice file's own patterns never come here (they run on RE2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipelines.voice.rules import Metric

_WORD = re.compile(r"\w+")
# "#4" (digits alone) is a number, as in "issue #4", not a hashtag.
_HASHTAG = re.compile(r"(?<!\w)#\w+")
# A sentence ends at . ! ? … (a run of them) or at a line break.
_SENTENCE = re.compile(r"[^.!?…\n]+[.!?…]*")
# The emoji blocks: pictographs, symbols, transport, flags, dingbats (not arrows or ©).
_EMOJI = re.compile("[\U0001f1e6-\U0001f1ff\U0001f300-\U0001faff\u2600-\u27bf\u2b50\u2b55]")
#: The first character of the emoji blocks: a text whose every character is below it (most
#: posts) has none, found without a scan of the block's class.
_FIRST_EMOJI = "\u2600"
_COUNTED: tuple[tuple[Metric, re.Pattern[str]], ...] = (
    ("exclamations", re.compile("!")),
    ("emoji", _EMOJI),
    ("hashtags", _HASHTAG),
)


@dataclass
class Figures:
    """Each metric's value, and the spans a tell on it marks."""

    values: dict[Metric, float] = field(default_factory=dict)
    marks: dict[Metric, list[tuple[int, int]]] = field(default_factory=dict)

    def value(self, metric: Metric) -> float:
        return self.values[metric]

    def spans(self, metric: Metric) -> list[tuple[int, int]]:
        return self.marks[metric]


def measure(text: str) -> Figures:
    figures = Figures()
    words = _sentences(text, figures)
    dashes = [(m.start(), m.end()) for m in re.finditer("—", text)] if "—" in text else []
    # Over at least 100 words: one dash in a short post is anyone's, two are a habit.
    figures.values["em_dashes"] = round(len(dashes) * 100 / max(words, 100), 2)
    figures.marks["em_dashes"] = dashes
    for metric, pattern in _COUNTED:
        spans = (
            [
                found.span()
                for found in pattern.finditer(text)
                if pattern is not _HASHTAG or not found.group()[1:].isdigit()
            ]
            if _may_hold(metric, text)
            else []
        )
        figures.values[metric] = len(spans)
        figures.marks[metric] = spans
    return figures


def _may_hold(metric: Metric, text: str) -> bool:
    """False when a plain test shows the text has nothing `metric` counts (a scan saved)."""
    if metric == "exclamations":
        return "!" in text
    if metric == "hashtags":
        return "#" in text
    return bool(text) and max(text) >= _FIRST_EMOJI


def _sentences(text: str, figures: Figures) -> int:
    """The longest sentence (its span) and the mean length, in words; the text's words
    (every word is in a sentence: what ends one holds no word character)."""
    lengths: list[tuple[int, tuple[int, int]]] = []
    for found in _SENTENCE.finditer(text):
        count = len(_WORD.findall(text, *found.span()))
        if count:
            lengths.append((count, found.span()))
    longest = max(lengths, default=(0, (0, 0)), key=lambda one: one[0])
    figures.values["sentence_words"] = longest[0]
    figures.marks["sentence_words"] = [longest[1]] if lengths else []
    mean = sum(count for count, _ in lengths) / len(lengths) if lengths else 0.0
    figures.values["mean_sentence_words"] = round(mean, 1)
    # A long average is the whole text's: marked from its first sentence to its last.
    whole = (lengths[0][1][0], lengths[-1][1][1]) if lengths else (0, 0)
    figures.marks["mean_sentence_words"] = [whole] if lengths else []
    return sum(count for count, _ in lengths)
