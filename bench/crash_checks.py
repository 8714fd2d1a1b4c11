"""What the crash bench checks, on the database a SIGKILL left and on what the fakes saw.

Each check returns findings as sentences; the bench counts each distinct sentence once,
so a broken invariant seen after several kills is one violation. The checks read the
store through its own read-only connections and never write.
"""

from __future__ import annotations

import collections
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.demo import llm as demo_llm
from store import db
from store.audit import events

#: Feed entries carry this tag in their title, so a provider request names its entry.
ENTRY_TAG = re.compile(r"crash-\d{5}")
#: How a triage question's prompt begins (pipelines/config/triage.py), and a draft's never does.
TRIAGE_PROMPT_START = "Question:"
_CARD_HEAD = re.compile(r"· item (\d+)\b")
_CARD_META = re.compile(r"version (\d+) · attempt (\d+)")

SETTLED_TWICE = """
SELECT entity_id, count(*) FROM events
WHERE entity = 'claim' AND to_state = 'settled' GROUP BY entity_id HAVING count(*) > 1
"""
SEEN_WITHOUT_ITEM = """
SELECT s.pipeline, s.scope, s.item_id FROM seen_items s
LEFT JOIN items i ON i.pipeline = s.pipeline AND i.scope = s.scope AND i.source_id = s.item_id
WHERE i.id IS NULL
"""
ITEMS = "SELECT id, source_id, state, attempt FROM items"
CLAIMS = """
SELECT c.id, c.item_id, c.state, c.lease_until, o.claim_id IS NOT NULL,
       EXISTS (SELECT 1 FROM events e WHERE e.entity = 'claim'
                  AND e.entity_id = CAST(c.id AS TEXT) AND e.from_state = 'uncertain'
                  AND e.to_state = 'settled')
FROM claims c LEFT JOIN llm_outputs o ON o.claim_id = c.id ORDER BY c.id
"""
DISPATCH_ROWS = "SELECT item_id, state, attempts FROM outbox WHERE kind = 'dispatch'"
#: Where an item is said to be stuck for good once the run has settled.
STUCK = ("drafting", "dispatching")


@dataclass
class Item:
    id: int
    source_id: str
    state: str
    attempt: int


@dataclass
class Claim:
    id: int
    item_id: int | None
    state: str
    lease_until: int
    has_output: bool
    #: Settled by an operator after it was uncertain (a call cut off by a kill).
    reconciled: bool = False


@dataclass
class Snapshot:
    """The rows the settled checks need, read in one go."""

    items: list[Item] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    dispatch_rows: dict[int, str] = field(default_factory=dict)
    settled_twice: dict[str, int] = field(default_factory=dict)


async def at_rest(data_dir: Path) -> list[str]:
    """The checks that hold at every instant: integrity, hash chain, atomic record, one settle."""
    try:
        store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    except Exception as exc:  # a store that cannot open is the finding itself
        return [f"the store does not open: {type(exc).__name__}: {exc}"]
    try:
        return await store.read(_at_rest_sync)
    except Exception as exc:  # "database disk image is malformed" and the like
        return [f"reading the store failed: {type(exc).__name__}: {exc}"]
    finally:
        await store.close()


def _at_rest_sync(conn: Any) -> list[str]:
    found = []
    integrity = [row[0] for row in conn.execute("PRAGMA integrity_check").fetchall()]
    if integrity != ["ok"]:
        found.append(f"PRAGMA integrity_check: {'; '.join(map(str, integrity[:3]))}")
    chain = events.verify_sync(conn)
    if not chain.ok:
        found.append(f"audit verify: hash chain broken: {chain.broken}")
    for pipeline, scope, source_id in conn.execute(SEEN_WITHOUT_ITEM):
        found.append(f"entry {source_id} ({pipeline}/{scope}) marked seen but has no item")
    for claim_id, times in conn.execute(SETTLED_TWICE):
        found.append(f"claim {claim_id} settled {times} times")
    return found


async def snapshot(data_dir: Path) -> Snapshot:
    store = await db.open(db.StoreConfig(data_dir=data_dir), readonly=True)
    try:
        return await store.read(_snapshot_sync)
    finally:
        await store.close()


def _snapshot_sync(conn: Any) -> Snapshot:
    return Snapshot(
        items=[Item(*row) for row in conn.execute(ITEMS)],
        claims=[
            Claim(i, item, s, lease, bool(out), bool(settled))
            for i, item, s, lease, out, settled in conn.execute(CLAIMS)
        ],
        dispatch_rows={
            item: f"{state}, {n} attempts" for item, state, n in conn.execute(DISPATCH_ROWS)
        },
        settled_twice={str(c): n for c, n in conn.execute(SETTLED_TWICE)},
    )


def missing_entries(snap: Snapshot, entries: Iterable[str]) -> list[str]:
    have = {item.source_id for item in snap.items}
    return [f"feed entry {entry} has no item" for entry in entries if entry not in have]


def held(snap: Snapshot, now_ms: int) -> dict[int, int]:
    """Drafting items whose last claim is started with its lease still running: item -> lease end.

    The call may still be in flight as far as the store can tell, so the ledger keeps the
    hold until the lease ends (then the claim turns uncertain and waits for an operator).
    """
    latest = _latest_claims(snap)
    return {
        item.id: claim.lease_until
        for item in snap.items
        if item.state == "drafting"
        and (claim := latest.get(item.id)) is not None
        and claim.state == "started"
        and claim.lease_until > now_ms
    }


def _latest_claims(snap: Snapshot) -> dict[int, Claim]:
    latest: dict[int, Claim] = {}
    for claim in snap.claims:
        if claim.item_id is not None:
            latest[claim.item_id] = claim  # ordered by id: the last one wins
    return latest


def orphans(snap: Snapshot, now_ms: int) -> dict[int, str]:
    """Items still in drafting or dispatching, each with what its claim or row says, and
    items the SLA sweep moved to breach (only drafting and dispatching breach: the fake
    services answer at once, so a breach here is work a crash left behind)."""
    latest = _latest_claims(snap)
    found = {}
    for item in snap.items:
        if item.state == "breach":
            found[item.id] = "breach (left in drafting or dispatching until its SLA)"
        elif item.state == "dispatching":
            found[item.id] = f"dispatching (dispatch row: {snap.dispatch_rows.get(item.id)})"
        elif item.state == "drafting":
            found[item.id] = "drafting, " + _claim_story(latest.get(item.id), now_ms)
    return found


def _claim_story(claim: Claim | None, now_ms: int) -> str:
    if claim is None:
        return "no claim (never reached the ledger)"
    if claim.state == "started":
        lease = "lease running" if claim.lease_until > now_ms else "lease expired"
        return f"claim started, {lease} (the call may have reached the provider)"
    output = "with" if claim.has_output else "without"
    return f"claim {claim.state} {output} a stored output"


def double_paid(
    snap: Snapshot,
    calls: collections.Counter[str],
    triage_calls: collections.Counter[str] | None = None,
) -> list[str]:
    """Provider calls, claims and settlements beyond one per item attempt. With
    `triage_calls` (the pipeline triages), also triage calls beyond one per entry (only a
    first attempt is triaged), and one more claim is allowed per item: its triage's.
    A call a kill cut off, whose uncertain claim the operator settled with no answer
    kept, is followed by the next try of the same attempt (its item goes on by itself):
    one more call and claim each, not a double payment."""
    found = []
    claims_per_item = collections.Counter(c.item_id for c in snap.claims if c.item_id)
    tries = collections.Counter(
        c.item_id for c in snap.claims if c.item_id and c.reconciled and not c.has_output
    )
    triaged = triage_calls is not None
    for item in snap.items:
        extra_calls = calls.get(item.source_id, 0) - item.attempt - tries[item.id]
        found += [
            f"item {item.id}: provider call {n + 1} for {item.attempt} attempt(s)"
            for n in range(item.attempt, item.attempt + max(0, extra_calls))
        ]
        if triage_calls is not None:
            found += [
                f"item {item.id}: triage call {n + 1}"
                for n in range(1, triage_calls.get(item.source_id, 0))
            ]
        allowed = item.attempt + triaged + tries[item.id]
        extra_claims = claims_per_item.get(item.id, 0) - allowed
        found += [
            f"item {item.id}: claim {n + 1} for {item.attempt} attempt(s)"
            for n in range(allowed, allowed + max(0, extra_claims))
        ]
    for claim_id, times in snap.settled_twice.items():
        found += [f"claim {claim_id}: settlement {n + 2}" for n in range(times - 1)]
    known = {item.source_id for item in snap.items}
    asked = set(calls) | set(triage_calls or ())
    found += [
        f"provider called for {entry}, which has no item" for entry in asked if entry not in known
    ]
    return found


def provider_calls(bodies: Iterable[Any], kind: str = "draft") -> collections.Counter[str]:
    """Complete requests the fake provider received, per feed entry named in the prompt:
    drafts, or with kind="triage" the triage questions (their prompt starts "Question:").

    A body that is not JSON was cut short by a kill while it was being sent: no provider
    answers (or charges for) half a request, so it is not a call.
    """
    counted: collections.Counter[str] = collections.Counter()
    for body in bodies:
        if isinstance(body, dict) and is_triage(body) == (kind == "triage"):
            match = ENTRY_TAG.search(json.dumps(body))
            counted[match.group(0) if match else "a request naming no entry"] += 1
    return counted


def is_triage(body: Any) -> bool:
    """Whether a request is a triage question rather than a draft."""
    return demo_llm.user_text(body).startswith(TRIAGE_PROMPT_START)


def conflicting_keys(requests: Iterable[tuple[str | None, bytes, int]]) -> list[str]:
    """Webhook idempotency keys sent with two different bodies (or sent without a key).

    Each request is (key, body, declared Content-Length). A body shorter than declared
    was cut by a kill in transit; no receiver acts on it, so it is not a second body.
    """
    bodies: dict[str, set[bytes]] = collections.defaultdict(set)
    found = []
    for key, body, declared in requests:
        if len(body) < declared:
            continue
        if not key:
            found.append("a webhook request without an Idempotency-Key")
        else:
            bodies[key].add(body)
    for key, seen in bodies.items():
        if len(seen) > 1:
            sizes = sorted(len(body) for body in seen)
            found.append(f"idempotency key {key} sent with {len(seen)} different bodies {sizes}")
    return found


def repeated_cards(texts: Iterable[str]) -> int:
    """Approval cards sent more than once for the same item, attempt and version."""
    shown: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for text in texts:
        head, meta = _CARD_HEAD.search(text), _CARD_META.search(text)
        if head and meta:
            shown[(head.group(1), meta.group(2), meta.group(1))] += 1
    return sum(n - 1 for n in shown.values())
