r"""Text shown to an operator, with nothing hidden: bidirectional controls, zero-width
characters and control characters in a model's or a feed's text become a visible mark.

    visible.shown("pay \u202eevil\u202c now")   # 'pay [U+202E]evil[U+202C] now'

A bidi override or isolate (U+202A..U+202E, U+2066..U+2069, and the marks U+200E, U+200F,
U+061C) reorders what follows it, so a card line can read other than the draft it shows
("Trojan Source"); a zero-width character (U+200B..U+200D, U+2060, U+FEFF) hides inside a
word; a control character (an ESC) can rewrite a terminal. They are marked, not removed:
the draft that goes out after approval is the one the operator approved, characters and
all, so the card must show that they are there. A zero-width joiner inside an emoji
(woman, ZWJ, laptop) and a joiner or non-joiner between two letters of a script other than Latin are
kept: Persian and the Indic scripts spell with them, and they reorder nothing.
"""

from __future__ import annotations

import re
import unicodedata

#: Characters that reorder the text after them.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: Characters that take no room.
_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
_ZWNJ, _ZWJ = "\u200c", "\u200d"
#: Every character marked; line breaks and tabs are layout and stay.
_HIDDEN = re.compile("[" + re.escape(_BIDI + _ZERO_WIDTH) + r"\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: What may stand before an emoji's joiner: a symbol, a variation selector, a skin tone.
_EMOJI_BEFORE = {"\ufe0f"} | {chr(c) for c in range(0x1F3FB, 0x1F400)}


def shown(text: str) -> str:
    """`text` with each hidden character replaced by `[U+XXXX]`."""
    if _HIDDEN.search(text) is None:  # nearly every text: no copy
        return text
    return _HIDDEN.sub(lambda found: _mark(text, found.start()), text)


def _mark(text: str, at: int) -> str:
    char = text[at]
    if char in (_ZWJ, _ZWNJ) and _joins(text, at):
        return char
    return f"[U+{ord(char):04X}]"


def _joins(text: str, at: int) -> bool:
    """Whether the joiner at `at` is spelling: inside an emoji, or between two letters
    of a script other than Latin (which never needs one)."""
    if at == 0 or at + 1 >= len(text):
        return False
    before, after = text[at - 1], text[at + 1]
    if text[at] == _ZWJ and unicodedata.category(after) == "So":
        return unicodedata.category(before) == "So" or before in _EMOJI_BEFORE
    return _letter_of_a_joining_script(before) and _letter_of_a_joining_script(after)


def _letter_of_a_joining_script(char: str) -> bool:
    # Past Latin Extended-B and IPA (U+02AF): Greek, Cyrillic, Arabic, the Indic scripts...
    return ord(char) > 0x2AF and unicodedata.category(char)[0] in "LM"
