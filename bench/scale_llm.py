"""The real path for `bench scale`: each item drafted by the LLM drafter through the
local fake LLM server (a small delay per reply, as a model takes), every call held and
settled in two budgets, the pipeline's and the global one.

    drafts = drafters(Target(base_url, max_calls))   # in a worker
    await set_budgets(store, names)   # once, before the workers start
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import SecretStr

from pipelines.drafting import choice
from pipelines.providers import client as providers
from store import db
from store.audit import events
from store.ledger import Limit, budgets, set_budget
from store.ledger import prices as ledger_prices

MODEL = "bench-model"
#: Seconds the fake LLM waits before each reply: the work waits on the model, not on CPU.
REPLY_DELAY_S = 0.02
#: Each scope's daily limit, micro-dollars: far above what the run spends (the bench
#: measures the budget rows' cost, not a refusal).
LIMIT_MICROS = 1_000_000_000
PRICES: ledger_prices.PriceTable = {
    MODEL: ledger_prices.Price(input_micros_per_mtok=1_000, output_micros_per_mtok=1_000)
}
DRAFT = """\
draft:
  drafter: llm
  prompt: ask.txt
  max_tokens: 200
"""
PROMPT = "Rewrite for the team:\n{title}\n{text}\n"


def write_prompt(folder: Path) -> None:
    (folder / "ask.txt").write_text(PROMPT)


@dataclass(frozen=True)
class Target:
    """The fake server a worker drafts on, and its client's ceiling of calls in flight
    (GATEHOUSE_LLM__MAX_CONCURRENT_CALLS)."""

    base_url: str
    max_calls: int


def drafters(target: Target) -> choice.Drafters:
    """`drafter_for` of a worker: the LlmDrafter on the fake server, priced."""
    settings = providers.ProviderSettings(
        kind="openai", base_url=target.base_url, api_key=SecretStr("bench-key"), model=MODEL,
        timeout_s=30, max_retries=1, max_retry_wait_s=1, max_concurrent_calls=target.max_calls,
    )  # fmt: skip
    return choice.Drafters(settings, PRICES)


async def set_budgets(store: db.Store, names: list[str]) -> None:
    """A day's budget for the global scope and for each pipeline."""
    now = datetime.now(UTC)
    for scope in (budgets.GLOBAL, *names):
        await set_budget(store, Limit(scope, "day", LIMIT_MICROS), events.operator(1), now)
