"""API tokens: one live token per name, on either backend."""

from __future__ import annotations

from datetime import datetime

import pytest

from store import db, errors, tokens
from tests import snapshot


async def test_a_live_name_is_refused_until_its_token_is_revoked(
    store: db.Store, now: datetime
) -> None:
    first = tokens.new_token()
    made = await tokens.create(store, "ci", tokens.digest(first), now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="already named 'ci'"):
        await tokens.create(store, "ci", tokens.digest(tokens.new_token()), now)
    assert await snapshot.tables(store) == before
    assert await tokens.authenticate(store, first) == made
    await tokens.revoke(store, "ci", now)
    assert await tokens.authenticate(store, first) is None
    again = await tokens.create(store, "ci", tokens.digest(tokens.new_token()), now)
    assert again.id != made.id
