"""Draft versions of an item's text, and operator edits.

An operator decision applies only to the version it was shown (invariant 4):
every new version bumps `items.version`, so a tap on an older card is stale.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store import backend, clock, errors, items, sql
from store.audit import events
from store.backends.core import Store
from store.items.machine import State

Q = sql.load("items")


@dataclass(frozen=True)
class Draft(backend.Record):
    item_id: int
    version: int
    text: str
    content_hash: str
    #: Who wrote it: {"drafter": "llm", "model": m, "claim": c}, or {"operator": id} for an edit.
    provenance: dict[str, Any]
    cost_micros: int | None
    created_at: datetime
    #: The image this version shows and sends (an http(s) URL), or None.
    image_url: str | None = None
    #: Its tells, as pipelines.voice.sidecar keeps them; None: it has none.
    tells: dict[str, Any] | None = None


@dataclass(frozen=True)
class Body:
    """What a version says and where it came from: the columns of a draft row its
    writer gives (the store adds the item, the version, the hash and the time)."""

    text: str
    #: Who wrote it: {"drafter": "llm", "model": m, "claim": c}, or {"operator": id} for an edit.
    provenance: dict[str, Any]
    cost_micros: int | None = None
    #: The image this version shows and sends (an http(s) URL), or None.
    image_url: str | None = None
    #: Its tells, as pipelines.voice.sidecar keeps them; None: it has none.
    tells: dict[str, Any] | None = None


@dataclass(frozen=True)
class Edit:
    """An operator's change to the version a card showed: which item and version, and
    who (`actor`, when the caller words it; else the operator's own actor string)."""

    item_id: int
    shown_version: int
    operator_id: int
    actor: str | None = None


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def add_sync(
    conn: backend.Conn,
    item_id: int,
    body: Body,
    now: datetime,
    *,
    locked: items.Item | None = None,
) -> Draft:
    """Store the next version and point the item at it (inside the caller's unit).
    `locked`: the item as the unit already locked it (its row is not read again)."""
    if locked is not None and locked.id != item_id:
        raise ValueError(f"locked is item {locked.id}, not item {item_id}")
    item = locked if locked is not None else items.lock_sync(conn, item_id)
    version = item.version + 1
    stored = insert_sync(conn, item_id, version, body, now)
    if conn.execute(Q["set_version"], {"id": item_id, "version": version}).rowcount != 1:
        raise errors.Conflict(f"item {item_id} gained a draft version underneath this one")
    return stored


def unstored(item_id: int, version: int, body: Body, now: datetime) -> Draft:
    """The version `insert_sync` would store, before it is: what its card shows, queued
    with the move that points the item at it."""
    created = clock.from_ms(clock.to_ms(now))
    return Draft(
        item_id,
        version,
        body.text,
        _text_hash(body.text),
        body.provenance,
        body.cost_micros,
        created,
        body.image_url,
        body.tells,
    )


def insert_sync(conn: backend.Conn, item_id: int, version: int, body: Body, now: datetime) -> Draft:
    """Store one draft version as given: the item already points at it, or is moved to it
    in the same unit (`items.Move(..., new_version=True)`)."""
    params = {
        "item_id": item_id,
        "version": version,
        "text": body.text,
        "content_hash": _text_hash(body.text),
        "provenance": json.dumps(body.provenance, ensure_ascii=False),
        "cost_micros": body.cost_micros,
        "now": clock.to_ms(now),
        "image_url": body.image_url,
        "tells": json.dumps(body.tells, ensure_ascii=False) if body.tells else None,
    }
    return Draft.from_row(conn.execute(Q["insert_draft"], params).fetchone())


def edit_sync(
    conn: backend.Conn, edit: Edit, text: str, now: datetime, tells: dict[str, Any] | None = None
) -> Draft:
    """An operator's replacement text becomes a new version; older cards go stale.

    Recorded as an awaiting_approval -> awaiting_approval event with its actor, so
    the history shows who changed the words the item is approved on. The new version
    keeps the image of the one it replaces, and has the `tells` its text was found to have
    (the store finds none: pipelines.approval.flow lints the text first).
    """
    if not text.strip():
        raise ValueError("the replacement text is empty")
    return _revise(conn, edit, now, Body(text, {}, tells=tells))


def remove_image_sync(conn: backend.Conn, edit: Edit, now: datetime) -> Draft:
    """A new version with the shown version's text (and tells) and no image, recorded as an
    edit is (an event with its actor), so the history shows who took the picture off."""
    return _revise(conn, edit, now, None)


def _revise(conn: backend.Conn, edit: Edit, now: datetime, new: Body | None) -> Draft:
    """The version after the shown one: its text replaced (`new`) or (None) its image dropped."""
    item_id, shown_version = edit.item_id, edit.shown_version
    item = items.lock_sync(conn, item_id)
    if item.state != State.AWAITING_APPROVAL:
        raise errors.IllegalTransition(
            f"item {item_id} is {item.state}; only drafts awaiting approval can be edited"
        )
    if item.version != shown_version:
        raise errors.Conflict(
            f"item {item_id} is at version {item.version}; the edit was for version {shown_version}"
        )
    shown = get_sync(conn, item_id, shown_version)
    if new is None and shown.image_url is None:
        raise errors.Conflict(f"item {item_id} version {shown_version} has no image to remove")
    body = Body(
        shown.text if new is None else new.text,
        {"operator": edit.operator_id, "edit_of": shown_version},
        image_url=shown.image_url if new is not None else None,
        tells=shown.tells if new is None else new.tells,
    )
    draft = add_sync(conn, item_id, body, now)
    what = "edited" if new is not None else "image removed"
    events.append(
        conn,
        "item",
        item_id,
        item.state,
        item.state,
        edit.actor or events.operator(edit.operator_id),
        now,
        attempt=item.attempt,
        reason=f"{what}: version {shown_version} -> {draft.version}",
    )
    return draft


def get_sync(conn: backend.Conn, item_id: int, version: int) -> Draft:
    params = {"item_id": item_id, "version": version}
    draft = backend.fetch_one(conn, Q["draft"], params, Draft.from_row)
    if draft is None:
        raise errors.NotFound(f"item {item_id} has no draft version {version}")
    return draft


def get_many_sync(
    conn: backend.Conn, wanted: Iterable[tuple[int, int]]
) -> dict[tuple[int, int], Draft]:
    """Several versions in one statement, by (item id, version); one not found is left out."""
    asked = [{"item_id": item_id, "version": version} for item_id, version in wanted]
    if not asked:
        return {}
    found = backend.fetch_all(conn, Q["drafts"], {"wanted": json.dumps(asked)}, Draft.from_row)
    return {(draft.item_id, draft.version): draft for draft in found}


async def get(store: Store, item_id: int, version: int) -> Draft:
    return await store.read(get_sync, item_id, version)
