"""The words of an alert: the text a pipeline wrote, or the facts the store recorded.

    alerts.text(payloads.Alert.of(row))      # plain text
    alerts.html(payloads.Alert.of(row))      # escaped and marked, as the sender sends it
    alerts.row_text(row)                     # the same, from the outbox row

The store records what happened (a budget crossed 80 %, calls became uncertain) and
leaves the wording, which names the CLI commands an operator can use, to this module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bot.chat import render
from store import clock, outbox, payloads, units


def text(alert: payloads.Alert) -> str:
    """What the operators read for `alert`; facts missing a field are shown as they are."""
    if alert.about is None:
        return alert.text
    try:
        return _WORDS[alert.about](alert.facts, alert.item_id)
    except (KeyError, TypeError, ValueError):
        return f"{alert.about}: {alert.facts}"


def html(alert: payloads.Alert) -> str:
    """`text` escaped for Telegram HTML, marked as a warning or an error."""
    mark = "🚨" if alert.level == "error" else "⚠️"
    shown = render.esc(text(alert))
    if alert.level == "info":  # news, not a warning (the day's signed audit head)
        return shown
    return shown if shown[:1] in ("⏳", "🚨", "⚠", "💸") else f"{mark} {shown}"


def row_text(row: outbox.Row) -> str:
    """`text` of an alert row (BadPayload if the row is not a well-formed alert)."""
    return text(payloads.Alert.of(row))


def _budget_threshold(f: Mapping[str, Any], item_id: int | None) -> str:
    return (
        f"Budget {f['budget']}: {f['pct']}% reached — spent {units.money(f['spent_micros'])} "
        f"of {units.money(f['limit_micros'])} ({units.money(f['held_micros'])} held)"
    )


def _claim_uncertain(f: Mapping[str, Any], item_id: int | None) -> str:
    item = f", item {item_id}" if item_id is not None else ""
    return (
        f"💸 claim {f['claim_id']} ({f['pipeline']}{item}) is uncertain: {f['reason']}. "
        f"Its hold of {units.usd(f['held_micros'])} stays until you reconcile it with the "
        f"provider's figure: gatehouse reconcile-claim {f['claim_id']} <usd> <evidence>"
    )


def _claims_uncertain(f: Mapping[str, Any], item_id: int | None) -> str:
    """One episode: the calls a stop or a crash cut off, told once with what they hold."""
    count = len(f["claim_ids"])
    calls = "1 call was" if count == 1 else f"{count} calls were"
    begun = f["last_started"]
    when = f"begun by {units.when(clock.from_ms(begun))}; " if begun else ""
    where = ", ".join(f["pipelines"])
    return (
        f"💸 {calls} cut off ({when}{where}) · {units.usd(f['held_micros'])} held: "
        f"{f['reason']}. The provider may have charged them; its console says. "
        "Not charged settles them at $0, Charged at what each held (or: gatehouse "
        "reconcile-claim --uncertain --at zero|reserve --evidence TEXT); the items "
        "waiting behind them then go on by themselves."
    )


def _claim_overrun(f: Mapping[str, Any], item_id: int | None) -> str:
    return (
        f"Claim {f['claim_id']} cost {units.usd(f['cost_micros'])} ({f['cost_micros']} micros), "
        f"more than the {f['held_micros']} micros held for its worst case: check the price "
        "table and max_tokens"
    )


_WORDS: dict[payloads.About, Callable[[Mapping[str, Any], int | None], str]] = {
    "budget_threshold": _budget_threshold,
    "claim_uncertain": _claim_uncertain,
    "claims_uncertain": _claims_uncertain,
    "claim_overrun": _claim_overrun,
}
