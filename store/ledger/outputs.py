"""What a paid LLM call produced, kept with its budget claim.

    reply = llm_outputs.Reply(text, model, request_id, None)
    spent = ledger_settle.Actual(cost, evidence, usage)
    await store.write(ledger_settle.complete_sync, claim.id, spent, item_hash, now, reply)
                                            # kept in the unit that settles the claim
    await store.write(llm_outputs.keep_sync, claim.id, reply, now)
                                            # or kept alone (a claim left uncertain)
    kept = await llm_outputs.get(store, claim.id)     # None: the call left nothing
    found = await store.read(llm_outputs.reusable_sync, ENDPOINT, keys, item, digest)

The output is saved in the same transaction that settles (or marks uncertain) the
claim, so a retry of the same attempt finds either both or neither: it reuses the
text instead of paying for a second call. `error` holds the validation message of
an output that was refused; the text stays for the operator to read.

An output the provider answered with but no draft ever showed (a crash between the
answer and the card, say) is reused by a later draft of the same item, in the same
attempt or after a replay, unless it was refused: an operator asking for a fresh draft
refuses it (`refuse_unshown_sync`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from store import backend, clock, items, sql
from store.backends import text as store_text
from store.backends.core import Store
from store.ledger import claims
from store.ledger.machine import ClaimState

Q = sql.load("llm_outputs")


@dataclass(frozen=True)
class Output(backend.Record):
    claim_id: int
    text: str
    model: str
    request_id: str | None
    #: Why the output was refused (validation or an unusable body); None when it was used.
    error: str | None
    created_at: datetime


@dataclass(frozen=True)
class Reply:
    """What a provider call gave, to keep with its claim: by `keep_sync`, or inside the
    statement that settles the claim (store/ledger/settle.py complete_sync)."""

    text: str
    model: str
    request_id: str | None
    #: Why the output is refused; None when it is used.
    error: str | None

    def params(self) -> dict[str, str | None]:
        """The columns to keep, cleaned of text the store cannot hold, so the settlement
        in the same unit always commits; the caller decides whether such an output is
        refused."""
        return {
            "text": store_text.clean(self.text),
            "model": store_text.clean(self.model),
            "request_id": None if self.request_id is None else store_text.clean(self.request_id),
            "error": None if self.error is None else store_text.clean(self.error),
        }


def keep_sync(conn: backend.Conn, claim_id: int, reply: Reply, now: datetime) -> None:
    """Record a claim's output inside the caller's unit; an existing record is kept."""
    conn.execute(Q["save"], {**reply.params(), "claim_id": claim_id, "now": clock.to_ms(now)})


def get_sync(conn: backend.Conn, claim_id: int) -> Output | None:
    return backend.fetch_one(conn, Q["get"], {"claim_id": claim_id}, Output.from_row)


async def get(store: Store, claim_id: int) -> Output | None:
    return await store.read(get_sync, claim_id)


def reusable_sync(
    conn: backend.Conn,
    endpoint: str,
    keys: Iterable[str],
    item: items.Item,
    request_digest: str,
) -> tuple[claims.Claim, Output] | None:
    """The output a draft may show instead of calling the provider, with its claim.

    `keys` are the item's claim keys, newest attempt first; the newest claim found
    decides. Its output is reusable when the provider answered (settled, or uncertain
    for want of usage), nobody refused it, no draft of the item shows it yet, and it
    answered the same request (model, limits, prompt) about the same content (that of
    `item`, the item as the draft read it).
    """
    for key in keys:
        claim = claims.by_key_sync(conn, endpoint, key)
        if claim is None:
            continue  # that attempt drafted without a claim (a reused output, a template)
        kept = get_sync(conn, claim.id)
        usable = (
            kept is not None
            and kept.error is None
            and claim.state in (ClaimState.SETTLED, ClaimState.UNCERTAIN)
            and (claim.request_digest, claim.item_hash) == (request_digest, item.content_hash)
            and not shown_sync(conn, item.id, claim.id)
        )
        return (claim, kept) if usable and kept is not None else None
    return None


def shown_sync(conn: backend.Conn, item_id: int, claim_id: int) -> bool:
    """Whether a draft version of the item was made from this claim's output."""
    params = {"item_id": item_id, "claim_id": claim_id}
    return conn.execute(Q["shown"], params).fetchone() is not None


def refuse_unshown_sync(conn: backend.Conn, item_id: int, reason: str) -> int:
    """Refuse the item's kept outputs that no draft shows; returns how many."""
    return conn.execute(Q["refuse_unshown"], {"item_id": item_id, "error": reason}).rowcount


def prune_sync(conn: backend.Conn, before: datetime, batch: int) -> int:
    """Delete up to `batch` outputs recorded before `before` whose claim is over."""
    return conn.execute(Q["prune"], {"cutoff": clock.to_ms(before), "batch": batch}).rowcount
