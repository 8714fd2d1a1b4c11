"""Operators' names as Telegram gives them with each update, kept so that every reply
can say who acted ("Ana (@ana)") rather than a numeric id, also after a restart.

    await people.remember(store, 1001, "Ana", "ana", now)
    known = await people.many(store, [1001, 1002])       # {1001: Person(...)}

Names are facts about a person, not state changes of an item: no event is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from store import backend, clock, sql
from store.backends.core import Store

Q = sql.load("people")
#: The longest name kept (characters); Telegram's own limit is 64.
MAX_NAME = 64


@dataclass(frozen=True)
class Person(backend.Record):
    user_id: int
    first_name: str | None
    username: str | None


def _clip(name: str | None) -> str | None:
    return name[:MAX_NAME] if name else None


def remember_sync(
    conn: backend.Conn,
    user_id: int,
    first_name: str | None,
    username: str | None,
    now: datetime,
) -> None:
    params = {
        "user_id": user_id,
        "first_name": _clip(first_name),
        "username": _clip(username),
        "now": clock.to_ms(now),
    }
    conn.execute(Q["remember"], params)


async def remember(
    store: Store, user_id: int, first_name: str | None, username: str | None, now: datetime
) -> None:
    await store.write(remember_sync, user_id, first_name, username, now)


def many_sync(conn: backend.Conn, ids: Iterable[int]) -> dict[int, Person]:
    params = {"ids": json.dumps(sorted(set(ids)))}
    return {p.user_id: p for p in backend.fetch_all(conn, Q["many"], params, Person.from_row)}


async def many(store: Store, ids: Iterable[int]) -> dict[int, Person]:
    """The known people among `ids`; unknown ids are left out."""
    wanted = list(ids)
    if not wanted:
        return {}
    return await store.read(many_sync, wanted)
