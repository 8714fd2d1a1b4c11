"""API tokens: one live token per name, on either backend."""

from __future__ import annotations

from datetime import datetime

import pytest

from store import db, errors
from store.audit import events, sealer
from store.intake import tokens
from tests import snapshot


async def test_a_live_name_is_refused_until_its_token_is_revoked(
    store: db.Store, now: datetime
) -> None:
    first = tokens.new_token()
    made = await tokens.create(store, "ci", tokens.digest(first), "cli", now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="already named 'ci'"):
        await tokens.create(store, "ci", tokens.digest(tokens.new_token()), "cli", now)
    assert await snapshot.tables(store) == before
    assert await tokens.authenticate(store, first) == made
    await tokens.revoke(store, "ci", "cli:ana", now)
    assert await tokens.authenticate(store, first) is None
    again = await tokens.create(store, "ci", tokens.digest(tokens.new_token()), "cli", now)
    assert again.id != made.id


async def test_creating_and_revoking_a_token_are_audited(store: db.Store, now: datetime) -> None:
    made = await tokens.create(store, "ci", tokens.digest(tokens.new_token()), "cli", now)
    with pytest.raises(errors.NotFound):
        await tokens.revoke(store, "nobody", "cli", now)  # refused: no event either
    await tokens.revoke(store, "ci", "cli:ana", now)
    trail = [
        (e.from_state, e.to_state, e.actor, e.reason)
        for e in await events.for_entity(store, "token", made.id)
    ]
    assert trail == [(None, "live", "cli", "ci"), ("live", "revoked", "cli:ana", "ci")]
    await sealer.seal(store)
    report = await events.verify_chain(store)
    assert report.ok and report.checked == 2
