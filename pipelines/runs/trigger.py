"""What the HTTP trigger does: start a run, or hand over an item, exactly once per
idempotency key.

    request = trigger.Request(caller, key, digest, now)
    answer = await trigger.request_run(store, pipelines, request, "news")
    answer = await trigger.hand_over(store, pipelines, request, "news", item)

A handed-over item goes the way a fetched one goes: dedup (scope `api`, shared by every
caller), an item row in `new`, then a run of its pipeline drafts it and queues its card.
The answer is kept with the key in the same transaction as the work, so a retry with
the same key and request gets the first answer back and changes nothing; the same key
with another request is a conflict. The HTTP side lives in bot/web/api.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator

from pipelines.config import spec
from pipelines.runs import intake
from pipelines.sources import MAX_TEXT_CHARS, MAX_TITLE_CHARS, base
from pipelines.text import validation
from store import backend, clock, errors
from store.backends import text as store_text
from store.db import Store
from store.intake import timetable, tokens

#: The dedup scope of every handed-over item.
SCOPE = "api"
#: The longest item id a caller may send (characters).
MAX_ID_CHARS = 256
#: The longest link (characters).
MAX_LINK_CHARS = 2048


class ItemIn(BaseModel):
    """A handed-over item: what a source would have fetched."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    title: str = Field(min_length=1, max_length=MAX_TITLE_CHARS)
    text: str = Field(default="", max_length=MAX_TEXT_CHARS)
    link: HttpUrl | None = Field(default=None)

    @field_validator("id")
    @classmethod
    def _storable(cls, value: str) -> str:
        # The id is the dedup key as sent: refused, not cleaned, so two ids never merge.
        problem = store_text.unstorable(value)
        if problem is not None:
            raise ValueError(f"holds text the store cannot keep: {problem}")
        return value

    def fetched(self, caller: str) -> base.FetchedItem:
        link = str(self.link) if self.link is not None else None
        if link is not None and len(link) > MAX_LINK_CHARS:
            raise ValueError(f"link: at most {MAX_LINK_CHARS} characters")
        return base.FetchedItem(
            source_id=self.id,
            title=validation.clean(self.title, MAX_TITLE_CHARS),
            text=validation.clean(self.text, MAX_TEXT_CHARS),
            link=link,
            extra={"via": "api", "caller": caller},
        )


@dataclass(frozen=True)
class Request:
    """One call as its idempotency record knows it: who sent it, the key it came with (if
    any), the hash of what it asked, and when it arrived."""

    caller: tokens.Token
    key: str | None
    digest: str
    at: datetime


class Conflict(errors.Conflict):
    """This idempotency key was used for another request."""


def _pipeline(pipelines: dict[str, spec.Pipeline], name: str) -> spec.Pipeline:
    found = pipelines.get(name)
    if found is None:
        known = ", ".join(sorted(pipelines)) or "none"
        raise errors.NotFound(f"no pipeline {name[:64]!r}; known: {known}")
    return found


async def _once(store: Store, request: Request, work: Any) -> tokens.Answer:
    """Run `work(conn) -> (status, body)` in one unit with its idempotency record. When
    another request with the same key commits first, this unit is undone and answers
    as a retry would."""
    caller, key = request.caller.id, request.key

    def unit(conn: backend.Conn) -> tokens.Answer:
        if key is not None:
            first = tokens.remembered_sync(conn, caller, key)
            if first is not None:
                return _replay(first, request.digest)
        status, body = work(conn)
        answer = tokens.Answer(request.digest, status, body)
        if key is not None:
            kept = tokens.remember_sync(conn, caller, key, answer, request.at)
            if kept is not answer:
                raise _Answered(kept)
        return answer

    try:
        return await store.write(unit)
    except _Answered as lost:
        return _replay(lost.first, request.digest)


class _Answered(Exception):
    """Another request with this key committed first; raised to roll this one back."""

    def __init__(self, first: tokens.Answer) -> None:
        super().__init__("answered already")
        self.first = first


def _replay(first: tokens.Answer, request_hash: str) -> tokens.Answer:
    """The first answer to a key, for a request that must be the same as the first."""
    if first.request_hash != request_hash:
        raise Conflict(
            "this Idempotency-Key was already used for a different request;"
            " use a new key for a new request"
        )
    return first


async def request_run(
    store: Store, pipelines: dict[str, spec.Pipeline], request: Request, name: str
) -> tokens.Answer:
    """Ask for a run of `name` at the scheduler's next pass (about a second)."""
    _pipeline(pipelines, name)
    now = request.at

    def work(conn: backend.Conn) -> tuple[int, dict[str, Any]]:
        timetable.request_run_sync(conn, name, now)
        return 202, {"pipeline": name, "run": "requested", "requested_at": _iso(now)}

    return await _once(store, request, work)


async def hand_over(
    store: Store,
    pipelines: dict[str, spec.Pipeline],
    request: Request,
    name: str,
    item: ItemIn,
) -> tokens.Answer:
    """Record `item` as fetched for `name` (202 with its id) or, when dedup has seen its
    id, change nothing (200, duplicate); a new item asks for a run that drafts it."""
    pipeline = _pipeline(pipelines, name)
    fetched = item.fetched(request.caller.name)
    now = request.at

    def work(conn: backend.Conn) -> tuple[int, dict[str, Any]]:
        created = intake.record_sync(conn, pipeline, SCOPE, [fetched], None, now, dedup=True)
        if not created:
            return 200, {"pipeline": name, "id": item.id, "item": None, "duplicate": True}
        timetable.request_run_sync(conn, name, now)
        body = {"pipeline": name, "id": item.id, "item": created[0].id, "duplicate": False}
        return 202, body

    return await _once(store, request, work)


def _iso(now: datetime) -> str:
    return clock.from_ms(clock.to_ms(now)).isoformat().replace("+00:00", "Z")
