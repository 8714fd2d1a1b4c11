"""The built-in tells: the words, phrases and habits readers have learnt to take for
machine prose, each with the one-line fix an editor would write in the margin.

Written for gatehouse rather than taken from slop-guard or proselint (docs/pipelines.md,
"Voice", says why): every pattern here is RE2, as a voice file's own must be, so one
engine runs them all in time linear in the draft. Words are whole words in any case;
a phrase with an apostrophe is listed with the typewriter one and the typographic one.
"""

from __future__ import annotations

from pipelines.voice.rules import Rule

#: RE2 for either apostrophe, ' or U+2019.
_APOS = r"['\x{2019}]"


def _apostrophes(*phrases: str) -> tuple[str, ...]:
    """Each phrase as typed, and with U+2019 for each ' (as word processors write it)."""
    return tuple(
        dict.fromkeys(p for phrase in phrases for p in (phrase, phrase.replace("'", "\u2019")))
    )


RULES: tuple[Rule, ...] = (
    # -- words ------------------------------------------------------------------------
    Rule("delve", "warn", "Say what was looked at: 'we read the minutes', not 'we delve'.",
         words=("delve", "delves", "delved", "delving")),
    Rule("tapestry", "warn", "Name the things themselves instead of a 'rich tapestry'.",
         words=("tapestry", "tapestries")),
    Rule("testament", "warn", "Say what it proves, plainly: drop 'a testament to'.",
         words=("a testament to", "testament to")),
    Rule("realm", "note", "'In the realm of X' is just 'in X'.",
         words=("in the realm of", "the realm of")),
    Rule("landscape", "note", "Say what changed, and when, instead of an 'evolving landscape'.",
         words=("ever-evolving", "ever-changing landscape", "evolving landscape")),
    Rule("pivotal", "note", "Show why it matters; 'pivotal' and 'crucial role' tell, not show.",
         words=("pivotal", "plays a crucial role", "play a crucial role", "a vital role")),
    Rule("game-changer", "warn", "Say what it changes, for whom.",
         words=("game-changer", "game changer", "game-changing")),
    Rule("seamless", "note", "'Seamless' promises; say what works and how.",
         words=("seamless", "seamlessly")),
    Rule("unlock", "note", "'Unlock the potential' is brochure talk: say what becomes possible.",
         words=("unlock the potential", "unleash", "unleashes", "unleashing")),
    Rule("embark", "note", "People start things; they rarely 'embark on a journey'.",
         words=("embark on", "embarks on", "embarked on", "embarking on")),
    Rule("bustling", "note", "Describe the street you saw: 'bustling' and 'vibrant' fit any town.",
         words=("bustling", "vibrant")),
    Rule("nestled", "note", "Give the place: 'nestled' is estate-agent prose.",
         words=("nestled",)),
    Rule("heart-of", "note", "Name the square or the street instead of 'in the heart of'.",
         words=("in the heart of",)),
    Rule("myriad", "note", "Give the number, or 'many'.",
         words=("myriad", "a plethora of", "plethora")),
    Rule("stock-verbs", "note", "Use the plain verb: shows, helps, uses, builds.",
         label="stock verbs",
         words=("underscores", "underscore", "underscored", "foster", "fosters", "fostering",
                "elevate", "elevates", "showcase", "showcases", "showcasing", "leverage",
                "leverages", "leveraging", "harness", "harnessing")),
    Rule("worth-noting", "warn", "If it is worth noting, just say it.", label="'worth noting'",
         words=_apostrophes("it is worth noting", "it's worth noting", "it is important to note",
                            "it's important to note", "it is worth mentioning",
                            "it's worth mentioning")),
    Rule("navigate", "note", "Say what the difficulty is instead of 'navigating complexities'.",
         words=("navigate the complexities", "navigating the complexities",
                "navigate the challenges", "navigating the challenges")),
    Rule("dive-in", "note", "Start with the news, not with 'let's dive in'.", label="'dive in'",
         words=_apostrophes("let's dive", "deep dive", "dive into", "dive in")),
    Rule("ai-disclosure", "block", "A chatbot's words leaked into the draft: cut them.",
         label="chatbot words",
         words=_apostrophes("as an ai", "as a language model", "as an ai language model",
                            "i hope this helps", "i cannot browse", "my knowledge cutoff",
                            "i don't have access to real-time")),
    # -- phrases --------------------------------------------------------------------------
    Rule("fast-paced-world", "warn", "Cut the opener and start with what happened.",
         label="'in today's world'",
         pattern=rf"(?i)\bin today{_APOS}s (?:(?:fast-paced|ever-changing|modern|digital) )?"
                 r"(?:world|age|era|landscape|society)\b"),
    Rule("not-just-its", "warn", "Say what it is, once: drop the 'not just X' half.",
         label="'it's not just X, it's Y'",
         pattern=rf"(?i)\b(?:it|this|that)(?:{_APOS}s| is) not (?:just|only|merely|simply) "
                 rf"[^.!?\n]{{1,80}}?[,;:\x{2014}\x{2013}] ?(?:it|this|that)(?:{_APOS}s| is)\b"),
    Rule("not-just-but", "warn", "Make the one claim that matters; 'not just … but' inflates it.",
         label="'not just … but'",
         pattern=r"(?i)\bnot (?:just|only|merely|simply)\b[^.!?\n]{1,80}?\bbut\b"),
    Rule("in-summary", "warn", "End on the last fact; a summary line repeats the post.",
         label="'in summary'",
         pattern=r"(?i)(?:^|[.!?]\s+|\n\s*)(?P<tell>in summary|in conclusion|to sum up|"
                 r"to summari[sz]e|all in all|in essence)\b"),
    Rule("rhetorical-opener", "warn", "Open with the news, not a question to the reader.",
         label="rhetorical opener",
         pattern=rf"(?i)(?:^|\n)\s*(?P<tell>ever wondered|have you ever|imagine (?:a|if|this)|"
                 rf"picture this|what if (?:i|we) told you|let{_APOS}s face it)\b"),
    Rule("chatbot-opener", "block", "A chatbot's reply opener leaked into the draft: cut it.",
         label="chatbot opener",
         pattern=r"(?i)^\s*(?P<tell>certainly|sure|absolutely|great question|of course)\s*[!,.]"),
    # -- counts ---------------------------------------------------------------------------
    Rule("em-dashes", "warn", "Use a comma, a colon or a full stop; keep one em dash at most.",
         label="em dashes", metric="em_dashes", limit=1.0),
    Rule("exclamations", "note", "One exclamation mark at most; let the news excite.",
         metric="exclamations", limit=1),
    Rule("emoji", "note", "Three emoji at most: more reads as a template.",
         metric="emoji", limit=3),
    Rule("hashtags", "note", "Three hashtags at most, at the end.",
         metric="hashtags", limit=3),
    Rule("long-sentence", "note", "Split the longest sentence: 35 words at most.",
         label="long sentence", metric="sentence_words", limit=35),
    Rule("sentence-length", "note", "Shorter sentences: 22 words each on average at most.",
         label="long sentences", metric="mean_sentence_words", limit=22),
)  # fmt: skip

NAMES: tuple[str, ...] = tuple(rule.name for rule in RULES)
