"""Try a pipeline before it goes live: the real engine, run against a throwaway store.

    report = await dryrun.run(pipeline, client, now, limit=5)        # template drafts
    report = await dryrun.run(pipeline, client, now, dryrun.Llm(settings, prices, left), limit=2)
    for item_id, payload in report.cards:
        print(card_text.card(item_id, payload))

The engine fetches, dedups, filters, records and drafts as a scheduled run would (each new
entry's verdict under the pipeline's `filter:` is in the report, with the rule that dropped
it, so a filter can be tried before it goes live), except that it
drafts only the `limit` newest new items (by published date; undated ones after, in the
source's order), so `--limit 2` makes at most two provider calls; the report counts the
rest as undrafted. It works in a temporary store that is deleted afterwards: the
pipeline's own store marks nothing seen and records no run, and no card, mail or webhook
leaves the machine (no bot and no dispatcher run). With a source's `full_text`, each card
says how long the extracted article was, or why the teaser was used. The duplicate gate
sees no earlier approvals, so no card is marked as a possible duplicate.

Without `llm`, drafts come from the template drafter and an LLM pipeline is drafted with
its template fallback, so nothing is spent. With `llm`, an LLM pipeline calls its provider
through the budget ledger like any other run (holds, settlement, uncertain holds): the
throwaway ledger's limits are what the real budgets have left (`Llm.left`), so a dry run
never spends past them, and the report says what the calls cost (the caller then counts
it against the real budgets: `store.ledger.charge`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from pipelines.config import spec
from pipelines.drafting import choice, drafters
from pipelines.providers import client as providers
from pipelines.runs.engine import Engine, Trial
from store import db, drafts, items, ledger, outbox
from store.db import Store
from store.items.machine import State
from store.ledger import prices as ledger_prices

NO_USAGE = ledger_prices.Usage(0, 0)
LLM_NOTE = "dry run: drafted with the template; the LLM is not called (add --llm to call it)"


@dataclass(frozen=True)
class Llm:
    """What a dry run drafts LLM pipelines with."""

    settings: providers.ProviderSettings | None
    prices: ledger_prices.PriceTable
    #: (scope, period, micros) the real budgets have left: the throwaway ledger's limits.
    left: Sequence[tuple[str, str, int]]


@dataclass(frozen=True)
class Verdict:
    """One new entry under the pipeline's filter: `rule` names what dropped it (None: kept)."""

    item: int
    title: str
    rule: str | None


@dataclass(frozen=True)
class Report:
    pipeline: str
    fetched: int
    errors: list[str]
    #: (item id in the throwaway store, the card's payload), in the order drafted.
    cards: list[tuple[int, dict[str, Any]]]
    #: (item id, reason) of items whose draft failed: a budget refusal, a provider error.
    failed: list[tuple[int, str]]
    #: What LLM drafting cost (settled) and held as uncertain (a provider that reported
    #: no usage): None when the LLM was not called.
    spend: ledger.Report | None = None
    #: Tokens and provider request ids of the LLM drafts on the cards.
    usage: ledger_prices.Usage = NO_USAGE
    request_ids: tuple[str, ...] = ()
    #: New items (fetched and not duplicates), and how many of them the limit left undrafted.
    new: int = 0
    undrafted: int = 0
    #: Every new entry's verdict under the filter, in the order fetched.
    verdicts: tuple[Verdict, ...] = ()

    @property
    def filtered(self) -> int:
        return sum(1 for verdict in self.verdicts if verdict.rule is not None)

    @property
    def llm_drafts(self) -> int:
        return sum(1 for _, payload in self.cards if payload.get("drafter") == "llm")

    @property
    def llm_calls(self) -> int:
        """Every call paid through the ledger: the drafts on the cards, and the others (a
        triage's score of each entry, a draft that failed)."""
        return sum(p.claims for p in self.spend.pipelines) if self.spend else 0

    @property
    def draft_micros(self) -> int:
        """What the drafts on the cards cost; the rest of `spent_micros` is the other calls."""
        costs = (payload.get("cost_micros") or 0 for _, payload in self.cards)
        return sum(costs) if self.spend else 0

    @property
    def spent_micros(self) -> int:
        return sum(p.spent_micros for p in self.spend.pipelines) if self.spend else 0

    @property
    def uncertain_micros(self) -> int:
        return sum(h.reserved_micros for h in self.spend.uncertain) if self.spend else 0


def _template(pipeline: spec.Pipeline) -> drafters.Drafter:
    note = LLM_NOTE if pipeline.draft.drafter == "llm" else None
    return drafters.TemplateDrafter(pipeline, note=note)


@dataclass
class _Newest:
    """Picks the `limit` newest of a tick's new items, and remembers which, newest first."""

    limit: int | None
    picked: list[int] = field(default_factory=list)

    def __call__(self, waiting: list[items.Item]) -> list[items.Item]:
        # A stable sort: items of one date, or with none, keep the source's order.
        chosen = sorted(waiting, key=_published, reverse=True)[: self.limit]
        self.picked += [item.id for item in chosen]
        return chosen


def _published(item: items.Item) -> datetime:
    when = item.payload.get("published")
    try:
        found = datetime.fromisoformat(when) if isinstance(when, str) else None
    except ValueError:
        found = None
    if found is None:
        return datetime.min.replace(tzinfo=UTC)
    return found if found.tzinfo else found.replace(tzinfo=UTC)


async def run(
    pipeline: spec.Pipeline,
    client: httpx.AsyncClient,
    now: datetime,
    llm: Llm | None = None,
    *,
    limit: int | None = None,
) -> Report:
    """Fetch and draft the pipeline into a throwaway store: at most `limit` drafts."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    newest = _Newest(limit)
    with tempfile.TemporaryDirectory(prefix="gatehouse-dry-run-") as scratch:
        # NORMAL: nothing here must survive a power cut, so skip the fsyncs.
        cfg = db.StoreConfig(data_dir=Path(scratch) / "data", synchronous="NORMAL")
        store = await db.open(cfg)
        choose = None if llm is None else choice.Drafters(llm.settings, llm.prices)
        try:
            if llm is not None:
                await _limits(store, llm.left, now)
            engine = Engine(
                store,
                {pipeline.name: pipeline},
                client=client,
                drafter_for=_template if choose is None else lambda p: choose(store, p),
                trial=Trial(select=newest, full_text_lengths=True),
            )
            tick = await engine.tick(pipeline.name, "manual", now)
            cards = [
                (row.item_id, row.payload)
                for item_id in newest.picked
                for row in await outbox.for_item(store, item_id, "card")
                if row.item_id is not None
            ]
            dropped = await items.in_state(store, State.FAILED, pipeline.name)
            failed = [(item.id, item.reason or "no reason recorded") for item in dropped]
            spend = None if llm is None else await ledger.report(store, now)
            usage, request_ids = await _drafted(store, cards)
            verdicts = await _verdicts(store, tick.created)
        finally:
            if choose is not None:
                await choose.aclose()
            await store.close()
    return Report(
        pipeline.name, tick.counts.fetched, tick.errors, cards, failed, spend, usage, request_ids,
        new=tick.counts.new, undrafted=tick.counts.new - tick.counts.filtered - len(newest.picked),
        verdicts=verdicts,
    )  # fmt: skip


async def _verdicts(store: Store, created: list[int]) -> tuple[Verdict, ...]:
    found = [await items.get(store, item_id) for item_id in created]
    return tuple(
        Verdict(
            item.id,
            str(item.payload.get("title") or item.source_id),
            item.reason if item.state == State.FILTERED else None,
        )
        for item in found
    )


async def _drafted(
    store: Store, cards: list[tuple[int, dict[str, Any]]]
) -> tuple[ledger_prices.Usage, tuple[str, ...]]:
    """The tokens and request ids behind the cards' LLM drafts (from their claims)."""
    tokens_in = tokens_out = 0
    request_ids = []
    for item_id, payload in cards:
        if payload.get("drafter") != "llm":
            continue
        draft = await drafts.get(store, item_id, int(payload["version"]))
        claim_id = draft.provenance.get("claim")
        if claim_id is None:
            continue
        claim = await ledger.get(store, int(claim_id))
        if claim.usage is not None:
            tokens_in, tokens_out = tokens_in + claim.usage[0], tokens_out + claim.usage[1]
        if draft.provenance.get("request_id"):
            request_ids.append(str(draft.provenance["request_id"]))
    return ledger_prices.Usage(tokens_in, tokens_out), tuple(request_ids)


async def _limits(store: Store, left: Sequence[tuple[str, str, int]], now: datetime) -> None:
    for scope, period, micros in left:
        await ledger.set_budget(store, ledger.Limit(scope, period, max(micros, 0)), "system", now)
