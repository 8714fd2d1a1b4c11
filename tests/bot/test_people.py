"""People by name, on a real store: one label for everyone, ids only where no name is
known, names kept across a new store connection, and written only when they change."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.chat import people
from bot.cli import output as cli_output
from pipelines import operations
from store import db, items
from store.items.machine import State
from store.review import people as people_store


@dataclass
class User:
    id: int
    first_name: str
    username: str | None = None


def test_labels_are_one_shape_everywhere() -> None:
    Person = people_store.Person
    assert people.label(7, Person(7, "Ana", "ana")) == "Ana (@ana)"
    assert people.label(7, Person(7, "Ana", None)) == "Ana"
    assert people.label(7, Person(7, None, "ana")) == "@ana"
    assert people.label(7, None) == "operator 7"
    shown = {7: "Ana <x> (@ana)"}
    assert people.replace("approved by operator:7, operator:8", shown) == (
        "approved by Ana <x> (@ana), operator 8"
    )
    assert people.replace("by operator:7", shown, as_html=True) == "by Ana &lt;x&gt; (@ana)"


async def test_names_are_kept_and_written_only_when_they_change(
    store: db.Store, data_dir: object, now: datetime
) -> None:
    await people.note(store, User(7, "Ana", "ana"), now)
    assert await people.humanize(store, "rejected by operator:7") == "rejected by Ana (@ana)"
    before = await store.read(lambda c: c.execute("SELECT updated_at FROM people").fetchall())
    await people.note(store, User(7, "Ana", "ana"), now + timedelta(hours=1))  # unchanged
    after = await store.read(lambda c: c.execute("SELECT updated_at FROM people").fetchall())
    assert before == after
    await people.note(store, User(7, "Anna", "ana"), now + timedelta(hours=2))
    assert await people.humanize(store, "operator:7") == "Anna (@ana)"


async def test_the_cli_history_names_who_acted(store: db.Store, now: datetime) -> None:
    item = await store.write(items.create_sync, "news", "feed", "g1", {"title": "T"}, now)
    assert item is not None
    await store.write(
        items.transition_sync, item.id, State.FAILED, "operator:7", now, reason="by operator:7"
    )
    await people.note(store, User(7, "Ana", "ana"), now)
    found = await operations.history(store, item.id)
    text = cli_output.history(found, await people.labels(store, [7]))
    assert "Ana (@ana)" in text and "operator:7" not in text
