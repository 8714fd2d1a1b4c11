"""What a rewrite asks the model, and what its card says of the answer. Pure: the paid call
itself goes through the budget ledger like a draft's.

    asked = rewrite.prompt(text, lint.lint(text, rules), style)  # draft, tells, voice
    rewrite.compared(text, old_tells, new_text, new_tells)  # "rewrite: 3 tells → 0, 212 → 174 ..."
    rewrite.lost(text, new_text)    # ["12", "Riverside", ...]: what the draft had, the rewrite not
    rewrite.added(old_tells, new_tells)   # the rules the rewrite hit that the draft did not

`lost` is how a rewrite that changed a fact shows on the card instead of hiding: the
numbers, links and names (capitalised words past a sentence's first) of the draft that
the rewrite no longer holds, each once, in the draft's order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipelines.voice import lint

#: The most rules a prompt lists (one line each, with how often the draft hits it).
MAX_LISTED = 20
#: The most lost facts a card names.
MAX_LOST = 5
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*%?")
_LINK = re.compile(r"https?://[^\s<>\"']+")
#: A capitalised word or a run of them: a name, unless it opens a sentence.
_NAME = re.compile(r"\b[A-Z][\w'\u2019-]*(?:[ \t]+[A-Z][\w'\u2019-]*)*")
#: What ends a sentence, so the capitalised word after it is not taken for a name.
_SENTENCE_END = re.compile(r"(?:^|[.!?:…]|\n)\s*$")

INSTRUCTION = (
    "Rewrite the draft below in the channel's voice. Keep every fact, number, name and "
    "link exactly as the draft has them; change only the wording. Answer with the "
    "rewritten post alone."
)


def prompt(text: str, tells: lint.Tells, style: Sequence[str]) -> str:
    """The rewrite's question: the instruction, the voice's sentences, each tell with its
    hint, then the draft."""
    parts = [INSTRUCTION]
    if style:
        parts.append("The channel's voice:\n" + "\n".join(f"- {line}" for line in style))
    if tells:
        parts.append("What a reader would notice, to fix:\n" + "\n".join(_listed(tells)))
    parts.append(f"Draft:\n{text}")
    return "\n\n".join(parts)


def _listed(tells: lint.Tells) -> list[str]:
    """One line per rule hit: its label, how often, its first words, its hint."""
    first: dict[str, lint.Hit] = {}
    times: dict[str, int] = {}
    for hit in tells.hits:
        first.setdefault(hit.rule, hit)
        times[hit.rule] = times.get(hit.rule, 0) + 1
    lines = []
    for rule, hit in list(first.items())[:MAX_LISTED]:
        count = f" ({times[rule]} times)" if times[rule] > 1 else ""
        lines.append(f'- {hit.label}{count}: "{hit.text}" ({hit.hint})')
    return lines


def compared(old_text: str, old: lint.Tells, new_text: str, new: lint.Tells) -> str:
    """The card's line for a rewrite: `rewrite: 3 tells → 0, 212 → 174 characters`."""
    before, after = len(old.groups()), len(new.groups())
    noun = "tell" if before == 1 else "tells"
    return f"rewrite: {before} {noun} → {after}, {len(old_text)} → {len(new_text)} characters"


def lost(old_text: str, new_text: str) -> list[str]:
    """The numbers, links and names of `old_text` that `new_text` no longer holds."""
    kept = _facts(new_text)
    return [fact for fact in _facts(old_text) if fact not in kept][:MAX_LOST]


def added(old: lint.Tells, new: lint.Tells) -> list[str]:
    """The rules the rewrite hit that the draft did not: the labels, in the card's order."""
    had = {group.label for group in old.groups()}
    return [group.label for group in new.groups() if group.label not in had]


def _facts(text: str) -> list[str]:
    """Links, numbers and names, each once, in the order the text has them."""
    # A sentence's full stop after a link is not part of it.
    found = [(m.start(), m.group().rstrip(".,;:!?)")) for m in _LINK.finditer(text)]
    rest = _LINK.sub(lambda m: " " * len(m.group()), text)  # same offsets, links gone
    found += [(m.start(), m.group()) for m in _NUMBER.finditer(rest)]
    for m in _NAME.finditer(rest):
        if not _SENTENCE_END.search(rest[max(0, m.start() - 3) : m.start()]):
            found.append((m.start(), m.group()))
        elif " " in m.group():  # "The Riverside Gazette" at a start: the name after "The"
            word, name = m.group().split(" ", 1)
            found.append((m.start() + len(word) + 1, name.strip()))
    return list(dict.fromkeys(fact for _, fact in sorted(found)))
