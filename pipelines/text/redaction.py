"""Secrets kept out of every line gatehouse writes down: log lines, errors, alerts.

    redaction.redact("GET /bot123:ABC.../getMe")   # "GET /bot<redacted>/getMe"
    redaction.remember(key)                         # a secret gatehouse holds: always redacted

Found by their shape, without being told: Telegram bot tokens (bare, or the whole path
segment after `/bot` in a Bot API URL), trigger tokens (`ghtk_...`), what follows
`Bearer` or `Basic` (an Authorization value, whoever sent it), a password in a
URL (`scheme://user:password@host`), and a header tornado quotes when it refuses it
(`Invalid header value '...'`: an API key may travel in any header). Found because they
were remembered: every secret gatehouse holds (the bot token, the webhook and callback
secrets, provider API keys, the database URL's password, a source's or destination's
password or `env:` header), also as Python's repr and percent-encoding write it, since a
library may log either.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections.abc import Iterable

#: What a redacted secret becomes.
REDACTED = "<redacted>"
#: Shorter remembered values are not searched for: replacing every "p" of a one-letter
#: test password would make each line unreadable and protect nothing.
MIN_SECRET_CHARS = 4

# Telegram bot tokens look like "<bot id>:<secret>"; inside Bot API URLs the whole path
# segment after "/bot" is the token, well-formed or not.
_URL_TOKEN = re.compile(r"(/bot)[^/\s]+")
_BARE_TOKEN = re.compile(r"\b\d{3,}:[A-Za-z0-9_-]{20,}\b")
# store.intake.tokens.PREFIX; any tail, even a cut one, since a prefix of a token is a clue.
_TRIGGER_TOKEN = re.compile(r"ghtk_[A-Za-z0-9_-]+")
# An Authorization value's credentials ("bearer" in any case, as HTTP allows; "Basic" as
# written, so English "basic" stays).
_AUTHORIZATION = re.compile(r"\b((?i:bearer)|Basic)(\s+)[^\s'\",;]+")
_URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@", re.IGNORECASE)
# Tornado's words for a header it refuses, followed by the header's value or whole line.
_REFUSED_HEADER = re.compile(
    r"(Invalid header (?:name|value) |Illegal characters \(CR or LF\) in header: ).*"
)

_lock = threading.Lock()
#: Every remembered secret and its spellings, longest first (replaced whole, never
#: mutated: a reader on another thread iterates the tuple it took).
_known: tuple[str, ...] = ()


def spellings(secret: str) -> set[str]:
    """`secret` as it may appear in a line: itself, repr-escaped, percent-encoded."""
    return {secret, repr(secret)[1:-1], urllib.parse.quote(secret, safe="")} - {""}


def remember(*secrets: str | None) -> None:
    """Redact these secrets from now on, in every line of this process."""
    global _known
    found = {
        spelling
        for secret in secrets
        if secret and len(secret) >= MIN_SECRET_CHARS
        for spelling in spellings(secret)
    }
    if not found - set(_known):
        return
    with _lock:
        _known = tuple(sorted(found | set(_known), key=len, reverse=True))


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every remembered secret, each of `secrets` and anything shaped like a
    token or a credential replaced."""
    given = {spelling for secret in secrets if secret for spelling in spellings(secret)}
    for secret in sorted(given, key=len, reverse=True) + list(_known):
        text = text.replace(secret, REDACTED)
    text = _REFUSED_HEADER.sub(r"\1" + REDACTED, text)
    text = _URL_TOKEN.sub(r"\1" + REDACTED, text)
    text = _TRIGGER_TOKEN.sub("ghtk_" + REDACTED, text)
    text = _AUTHORIZATION.sub(r"\1\2" + REDACTED, text)
    text = _URL_PASSWORD.sub(r"\1" + REDACTED + "@", text)
    return _BARE_TOKEN.sub(REDACTED, text)
