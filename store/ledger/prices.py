"""Model prices and what a call costs, in integer micros (1 USD = 1_000_000 micros).

    price = prices.Price(input_micros_per_mtok=3_000_000, output_micros_per_mtok=15_000_000)
    reserve = prices.worst_case(price, max_input_tokens=8_000, max_tokens=1_024)
    actual = prices.cost(prices.Usage(input_tokens=812, output_tokens=240), price)

Prices are per million tokens, as providers publish them. Every figure rounds up
to the next micro, so the ledger never under-counts; with integers only, the
same usage always costs the same, on every machine. Settings hold the table as
`GATEHOUSE_PRICES` (model name -> Price); `lookup` names the known models when
one is missing.
"""

from __future__ import annotations

from typing import NamedTuple

import pydantic

#: Tokens per price unit: providers quote prices per million tokens.
TOKENS_PER_UNIT = 1_000_000


class Price(pydantic.BaseModel):
    """One model's price: integer micros per million input and output tokens."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", strict=True)

    input_micros_per_mtok: int = pydantic.Field(ge=0)
    output_micros_per_mtok: int = pydantic.Field(ge=0)


class Usage(NamedTuple):
    """Tokens a provider reports for one call."""

    input_tokens: int
    output_tokens: int


PriceTable = dict[str, Price]


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def cost(usage: Usage | tuple[int, int], price: Price) -> int:
    """What the usage costs in micros, rounded up to the next whole micro."""
    input_tokens, output_tokens = usage
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
    total = (
        input_tokens * price.input_micros_per_mtok + output_tokens * price.output_micros_per_mtok
    )
    return _ceil_div(total, TOKENS_PER_UNIT)


def worst_case(price: Price, max_input_tokens: int, max_tokens: int) -> int:
    """The most a call can cost: the whole prompt budget in, max_tokens out.

    This is what begin() holds; because the provider cannot return more than
    max_tokens, the settled figure normally never exceeds it.
    """
    return cost(Usage(max_input_tokens, max_tokens), price)


def lookup(table: PriceTable, model: str) -> Price:
    """The model's price, or a clear error naming the models that have one."""
    try:
        return table[model]
    except KeyError:
        known = ", ".join(sorted(table)) or "none configured"
        raise KeyError(
            f"no price for model {model!r} in GATEHOUSE_PRICES; priced models: {known}"
        ) from None
