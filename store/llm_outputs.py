"""What a paid LLM call produced, kept with its budget claim.

    def unit(conn):
        llm_outputs.save_sync(conn, claim.id, text, model, request_id, None, now)
        ledger_settle.complete_sync(conn, claim.id, usage, cost, evidence, item_hash, now)
    await store.write(unit)
    kept = await llm_outputs.get(store, claim.id)     # None: the call left nothing

The output is saved in the same transaction that settles (or marks uncertain) the
claim, so a retry of the same attempt finds either both or neither: it reuses the
text instead of paying for a second call. `error` holds the validation message of
an output that was refused; the text stays for the operator to read.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime

from store import clock, sql
from store.db import Store

Q = sql.load("llm_outputs")


@dataclass(frozen=True)
class Output:
    claim_id: int
    text: str
    model: str
    request_id: str | None
    #: Why the output was refused (validation or an unusable body); None when it was used.
    error: str | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Output:
        return cls(
            claim_id=row["claim_id"],
            text=row["text"],
            model=row["model"],
            request_id=row["request_id"],
            error=row["error"],
            created_at=clock.from_ms(row["created_at"]),
        )


def save_sync(
    conn: sqlite3.Connection,
    claim_id: int,
    text: str,
    model: str,
    request_id: str | None,
    error: str | None,
    now: datetime,
) -> None:
    """Record a claim's output inside the caller's unit; an existing record is kept."""
    params = {
        "claim_id": claim_id,
        "text": text,
        "model": model,
        "request_id": request_id,
        "error": error,
        "now": clock.to_ms(now),
    }
    conn.execute(Q["save"], params)


def get_sync(conn: sqlite3.Connection, claim_id: int) -> Output | None:
    cursor = conn.execute(Q["get"], {"claim_id": claim_id})
    cursor.row_factory = sqlite3.Row
    row = cursor.fetchone()
    return Output.from_row(row) if row else None


async def get(store: Store, claim_id: int) -> Output | None:
    return await store.read(lambda conn: get_sync(conn, claim_id))


def prune_sync(conn: sqlite3.Connection, before: datetime, batch: int) -> int:
    """Delete up to `batch` outputs recorded before `before` whose claim is over."""
    return conn.execute(Q["prune"], {"cutoff": clock.to_ms(before), "batch": batch}).rowcount
