"""Rows become records by column name on both backends (store.backend.Record, fetch_*)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Self

import pytest

from store import backend, db

_ROW = (
    "SELECT 7 AS id, 'news' AS name, 1764504000000 AS at, NULL AS ended_at,"
    " 1 AS paused, 'b' AS level, '{\"k\": [1]}' AS extra, 'kept' AS note"
)


class Level(enum.StrEnum):
    A = "a"
    B = "b"


@dataclass(frozen=True)
class Sample(backend.Record):
    id: int
    name: str
    at: datetime
    ended_at: datetime | None
    paused: bool
    level: Level
    extra: dict[str, Any]
    note: str | None = None


@dataclass(frozen=True)
class Renamed(backend.Record):
    id: int
    label: str

    @classmethod
    def from_row(cls, row: backend.Row, /, **given: Any) -> Self:
        return super().from_row(row, label=row["name"].upper(), **given)


async def test_a_row_becomes_a_record_decoded_by_field_type(store: db.Store) -> None:
    found = await store.read(backend.fetch_one, _ROW, {}, Sample.from_row)
    assert found == Sample(
        7,
        "news",
        datetime(2025, 11, 30, 12, 0, tzinfo=UTC),
        None,
        True,
        Level.B,
        {"k": [1]},
        "kept",
    )
    assert type(found.paused) is bool and type(found.level) is Level


async def test_a_field_named_otherwise_is_given_by_the_subclass(store: db.Store) -> None:
    found = await store.read(backend.fetch_all, _ROW, {}, Renamed.from_row)
    assert found == [Renamed(7, "NEWS")]


@dataclass(frozen=True)
class Unread(backend.Record):
    id: int
    #: No column holds a timedelta: its record must pass it in.
    at: timedelta


async def test_a_field_no_column_can_hold_is_named_unless_given(store: db.Store) -> None:
    with pytest.raises(TypeError, match=r"Unread\.at .* is not read from a column"):
        await store.read(backend.fetch_one, _ROW, {}, Unread.from_row)
    given = await store.read(
        backend.fetch_one, _ROW, {}, lambda row: Unread.from_row(row, at=timedelta(seconds=1))
    )
    assert given == Unread(7, timedelta(seconds=1))


async def test_no_row_is_none_or_an_empty_list(store: db.Store) -> None:
    empty = _ROW + " WHERE 1 = 0"
    assert await store.read(backend.fetch_one, empty, {}, Sample.from_row) is None
    assert await store.read(backend.fetch_all, empty, {}, Sample.from_row) == []
