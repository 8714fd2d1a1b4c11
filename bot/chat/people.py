"""People by name: "Ana (@ana)" wherever the bot says who acted, the id only where no
name is known ("operator 1001").

    await people.note(store, update.effective_user, now)   # the gate, on every update
    text = await people.humanize(store, "approved by operator:1001")   # "approved by Ana (@ana)"

Names come from each operator's updates and are kept in the store (store.review.people), so
they show after a restart too. A name is written only when it changed: the cache here
remembers what this process last stored for each user.
"""

from __future__ import annotations

import html
import logging
import re
import weakref
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from store import errors
from store.db import Store
from store.review import people

log = logging.getLogger(__name__)

#: How the store and events name an operator ("operator:1001").
TOKEN = re.compile(r"\boperator:(\d{1,19})\b")

_stored: weakref.WeakKeyDictionary[Store, dict[int, tuple[str | None, str | None]]] = (
    weakref.WeakKeyDictionary()
)


def label(user_id: int, person: people.Person | None) -> str:
    """One way everywhere: "Ana (@ana)", "Ana", "@ana", else "operator 1001"."""
    if person is None or not (person.first_name or person.username):
        return f"operator {user_id}"
    if person.first_name and person.username:
        return f"{person.first_name} ({'@' + person.username})"
    return person.first_name or f"@{person.username}"


async def note(store: Store, user: Any, now: datetime) -> None:
    """Keep a Telegram user's names if they changed since this process last stored them."""
    if user is None:
        return
    names = (user.first_name or None, user.username or None)
    known = _stored.setdefault(store, {})
    if known.get(user.id) == names:
        return
    try:
        await people.remember(store, user.id, names[0], names[1], now)
    except errors.StoreError as exc:  # a full disk must not stop /status from answering
        log.warning("could not keep the names of user %d: %s", user.id, exc)
        return
    known[user.id] = names


async def labels(store: Store, ids: Iterable[int]) -> dict[int, str]:
    wanted = set(ids)
    found = await people.many(store, wanted)
    return {user_id: label(user_id, found.get(user_id)) for user_id in wanted}


def ids_in(text: str) -> set[int]:
    return {int(m) for m in TOKEN.findall(text)}


def replace(text: str, shown: dict[int, str], *, as_html: bool = False) -> str:
    """`text` with each "operator:<id>" in `shown` replaced by its label."""

    def name(match: re.Match[str]) -> str:
        found = shown.get(int(match.group(1)), f"operator {match.group(1)}")
        return html.escape(found, quote=False) if as_html else found

    return TOKEN.sub(name, text)


async def humanize(store: Store, text: str, *, as_html: bool = False) -> str:
    """`text` with every "operator:<id>" replaced by the person's label (escaped for HTML)."""
    ids = ids_in(text)
    return replace(text, await labels(store, ids), as_html=as_html) if ids else text


async def card_payload(store: Store, payload: dict[str, Any]) -> dict[str, Any]:
    """A card or card edit payload whose note and status lines name people."""
    out = dict(payload)
    for field in ("note", "status", "short_of"):
        if isinstance(out.get(field), str):
            out[field] = await humanize(store, out[field])
    return out
