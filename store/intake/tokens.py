"""Bearer tokens for the HTTP trigger, kept only as hashes, and the first answer to
each idempotency key a caller sent.

    token = tokens.new_token()                              # shown once, never stored
    await tokens.create(store, "ci", tokens.digest(token), "cli", now)
    found = await tokens.authenticate(store, token)         # the live Token, or None
    await tokens.revoke(store, "ci", "cli", now)

Creating and revoking each writes an audit event (entity "token", its id; the name as
the reason), so the chain says who let a caller in and when it was shut out.

A token is 256 random bits, so SHA-256 is as safe a hash for it as a slow one; the
lookup is by hash, so no comparison ever runs on the secret itself.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from store import backend, clock, errors, sql
from store.audit import events
from store.backends.core import Store

Q = sql.load("tokens")

#: What a token's name may be: it shows in `token list` and in items' payloads.
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
#: The prefix of every token, so a leaked one is recognisable (and redactable).
PREFIX = "ghtk_"
#: A token's states as its audit events name them.
LIVE = "live"
REVOKED = "revoked"
#: How long the first answer to an idempotency key is kept.
KEEP_ANSWERS = timedelta(days=7)


@dataclass(frozen=True)
class Token(backend.Record):
    id: int
    name: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class Answer:
    """The first answer to an idempotency key, and what the request it answered held."""

    request_hash: str
    status: int
    body: dict[str, Any]


def new_token() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_name(name: str) -> str:
    if not NAME.match(name):
        raise ValueError(
            f"token name {name[:70]!r} is not valid: 1 to 64 lowercase letters, digits, - and _,"
            " starting with a letter or digit"
        )
    return name


def create_sync(conn: backend.Conn, name: str, token_hash: str, actor: str, now: datetime) -> Token:
    """A live token named `name`, kept as its hash, with its audit event (none -> live)."""
    check_name(name)
    if not re.fullmatch(r"[0-9a-f]{64}", token_hash):
        raise ValueError("a token is stored as its SHA-256 in hex (64 characters)")
    # ON CONFLICT, not a caught driver error: on PostgreSQL a failed statement ends
    # the whole transaction.
    row = conn.execute(
        Q["create"], {"name": name, "hash": token_hash, "now": clock.to_ms(now)}
    ).fetchone()
    if row is None:
        raise errors.Conflict(
            f"a live token is already named {name!r}; revoke it first or choose another name"
        )
    token = Token.from_row(row)
    events.append(conn, "token", token.id, None, LIVE, actor, now, reason=name)
    return token


async def create(store: Store, name: str, token_hash: str, actor: str, now: datetime) -> Token:
    return await store.write(create_sync, name, token_hash, actor, now)


def revoke_sync(conn: backend.Conn, name: str, actor: str, now: datetime) -> Token:
    """The live token named `name` revoked at once, with its audit event (live -> revoked)."""
    row = conn.execute(Q["revoke"], {"name": name, "now": clock.to_ms(now)}).fetchone()
    if row is None:
        raise errors.NotFound(f"no live token named {name!r}; see gatehouse token list")
    token = Token.from_row(row)
    events.append(conn, "token", token.id, LIVE, REVOKED, actor, now, reason=name)
    return token


async def revoke(store: Store, name: str, actor: str, now: datetime) -> Token:
    return await store.write(revoke_sync, name, actor, now)


async def all_tokens(store: Store) -> list[Token]:
    return await store.read(backend.fetch_all, Q["all"], {}, Token.from_row)


async def authenticate(store: Store, token: str) -> Token | None:
    """The live token `token` is, or None (unknown or revoked)."""
    params = {"hash": digest(token)}
    return await store.read(backend.fetch_one, Q["live_by_hash"], params, Token.from_row)


def remembered_sync(conn: backend.Conn, token_id: int, key: str) -> Answer | None:
    row = conn.execute(Q["remembered"], {"token_id": token_id, "idem_key": key}).fetchone()
    return None if row is None else Answer(row[0], row[1], json.loads(row[2]))


def remember_sync(
    conn: backend.Conn, token_id: int, key: str, answer: Answer, now: datetime
) -> Answer:
    """Keep the first answer to `key`, and forget answers past KEEP_ANSWERS. Returns the
    answer kept: `answer` itself, or the first one when a request with the same key
    committed its own between this one's look and this insert."""
    conn.execute(Q["forget_before"], {"before": clock.to_ms(now - KEEP_ANSWERS)})
    params = {
        "token_id": token_id,
        "idem_key": key,
        "request_hash": answer.request_hash,
        "status": answer.status,
        "answer": json.dumps(answer.body),
        "now": clock.to_ms(now),
    }
    # ON CONFLICT, not a caught driver error: on PostgreSQL a failed statement ends
    # the whole transaction.
    if conn.execute(Q["remember"], params).fetchone() is not None:
        return answer
    first = remembered_sync(conn, token_id, key)
    assert first is not None, "the insert met this key's row"
    return first
