"""Which drafter each pipeline gets, and the provider clients the LLM drafters share.

choose = choice.Drafters(settings.llm, settings.prices)
RuntimeConfig(..., drafter_for=choose, workers=(choose.worker, ...))   # choose(store, pipeline)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from pipelines.config import spec, triage, voice
from pipelines.drafting import calls, drafters, paid, question, steps
from pipelines.drafting import llm as llm_drafter
from pipelines.providers import client as providers
from store.db import Store
from store.ledger import prices as ledger_prices


def fallback_reason(
    pipeline: spec.Pipeline,
    llm: providers.ProviderSettings | None,
    price_table: ledger_prices.PriceTable,
) -> str | None:
    """Why an llm pipeline has to use the template drafter, or None when it can use the LLM."""
    return _unpriced(llm, pipeline.draft.model or (llm.model if llm else ""), price_table)


def triage_reason(
    block: triage.TriageConfig,
    llm: providers.ProviderSettings | None,
    price_table: ledger_prices.PriceTable,
) -> str | None:
    """Why a pipeline's triage cannot be asked (no provider, no price), or None."""
    return _unpriced(llm, block.model or (llm.model if llm else ""), price_table)


def _unpriced(
    llm: providers.ProviderSettings | None, model: str, price_table: ledger_prices.PriceTable
) -> str | None:
    if llm is None:
        return "no LLM provider configured (GATEHOUSE_LLM__*)"
    if model not in price_table:
        return f"no price for model {model!r} in GATEHOUSE_PRICES"
    return None


class _Idles(Protocol):
    async def idle(self) -> None: ...


class _Scheduled(Protocol):
    """What the drafters' worker uses of the runtime: its scheduler, to wait for the runs."""

    @property
    def scheduler(self) -> _Idles: ...


class Drafters:
    """`drafter_for` for RuntimeConfig: template pipelines get the template drafter; llm
    pipelines the LlmDrafter when a provider and the model's price are configured, else
    the template drafter with a note saying why; each in a steps.Plan with the pipeline's
    voice rules after it, and its triage's question ahead of it if it has one. It owns
    one provider client per model; add `worker` to RuntimeConfig.workers so they are
    closed on stop. `park()` (the runtime calls it as a clean stop begins) makes every
    draft that gets its turn of a client from then on begin nothing: the stop starts no
    paid call.
    """

    def __init__(
        self,
        llm: providers.ProviderSettings | None,
        price_table: ledger_prices.PriceTable,
        *,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._llm = llm
        self._prices = dict(price_table)
        self._clients: dict[str, providers.ProviderClient] = {}
        #: What calls gave while the store failed is kept across ticks (paid.Shared).
        self._shared = paid.Shared(clock, parked=self.parked)
        self._parked = False

    def __call__(self, store: Store, pipeline: spec.Pipeline) -> drafters.Drafter:
        drafter = self._drafter(store, pipeline)
        tells = steps.Voice(voice.rules_of(pipeline.voice))
        if pipeline.triage is None:
            return steps.Plan(drafter, voice=tells)
        asker = self._asker(store, pipeline, pipeline.triage)
        asked = question.Question(store, pipeline.name, pipeline.triage, asker)
        return steps.Plan(drafter, triage=steps.Triage(asked), voice=tells)

    def _asker(
        self, store: Store, pipeline: spec.Pipeline, config_: triage.TriageConfig
    ) -> question.Asker:
        """The paid call of each try of a triage, or what says why it cannot run."""
        why = triage_reason(config_, self._llm, self._prices)
        if why is not None:
            return lambda call: question.CannotAsk(why)
        assert self._llm is not None
        model = config_.model or self._llm.model
        client = self._client(model)
        price = ledger_prices.lookup(self._prices, model)

        def ask(call: calls.Call) -> question.Asking:
            return paid.PaidCall(
                store,
                pipeline.name,
                client,
                price,
                call,
                unpaid=question.NoBudget(),
                shared=self._shared,
            )

        return ask

    def _drafter(self, store: Store, pipeline: spec.Pipeline) -> drafters.Drafter:
        if pipeline.draft.drafter == "template":
            return drafters.TemplateDrafter(pipeline)
        why = fallback_reason(pipeline, self._llm, self._prices)
        if why is not None:
            return drafters.TemplateDrafter(pipeline, note=f"{why}: template drafter used")
        assert self._llm is not None
        model = pipeline.draft.model or self._llm.model
        client = self._client(model)
        price = ledger_prices.lookup(self._prices, model)
        return llm_drafter.LlmDrafter(
            store,
            pipeline,
            client,
            price,
            shared=self._shared,
        )

    def park(self) -> None:
        """A clean stop began: drafts still waiting for a turn stay in drafting, untouched."""
        self._parked = True

    def parked(self) -> bool:
        return self._parked

    def _client(self, model: str) -> providers.ProviderClient:
        """The one provider client of this model."""
        assert self._llm is not None
        client = self._clients.get(model)
        if client is None:
            client = providers.ProviderClient(self._llm.model_copy(update={"model": model}))
            self._clients[model] = client
        return client

    async def worker(self, runtime: _Scheduled, stop: asyncio.Event) -> None:
        """A RuntimeConfig worker: close the provider clients when the runtime stops,
        once the runs in flight have ended (a clean stop keeps the drafts they began)."""
        await stop.wait()
        await runtime.scheduler.idle()
        await self.aclose()

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
