"""The buttons under an alert about uncertain claims (one episode, store/ledger/uncertain.py):
Not charged, Charged and List.

    markup = uncertain.keyboard(key, row.id, len(claim_ids))   # bot.app, as the alert goes
    await uncertain.settle(tap)                                 # Not charged / Charged
    await uncertain.listed(tap)                                 # List

A button names the alert's outbox row (item_id) and how many claims it lists (version);
the row's facts name the claims. Settling goes through operations.settle_uncertain, as
`gatehouse reconcile-claim --uncertain` does, in one transaction. Only an operator who
may settle money (GATEHOUSE_TELEGRAM__SETTLERS; unset: every operator) may tap Not
charged or Charged. A tap on an alert whose claims are settled already changes nothing
and says so.
"""

from __future__ import annotations

from telegram import InlineKeyboardButton, InlineKeyboardMarkup
from telegram.constants import ParseMode

from bot.cards import actions
from bot.chat import kit, render, wording
from bot.ground import callbacks
from pipelines import operations
from pipelines.text import telegram as telegram_text
from store import backend, errors, outbox, payloads, units
from store.audit import events
from store.db import Store
from store.ledger import claims

#: What each settling button settles at, and the evidence it records.
_AT: dict[callbacks.Action, tuple[str, str]] = {
    "not_charged": ("zero", "Not charged"),
    "charged": ("reserve", "Charged"),
}


def keyboard(key: bytes, row_id: int, count: int) -> InlineKeyboardMarkup:
    """Under an episode's alert: settle its claims at $0 or at their reserve, or list them."""
    labels: tuple[tuple[str, callbacks.Action], ...] = (
        ("🆓 Not charged", "not_charged"),
        ("💵 Charged", "charged"),
        ("📋 List", "list_claims"),
    )
    row = [
        InlineKeyboardButton(
            label, callback_data=callbacks.encode(key, callbacks.Button(action, row_id, 1, count))
        )
        for label, action in labels
    ]
    return InlineKeyboardMarkup([row])


async def episode(store: Store, row_id: int) -> list[int]:
    """The claims the alert in outbox row `row_id` names; Refused if it names none."""
    try:
        row = await store.read(outbox.get_sync, row_id)
    except errors.NotFound:
        raise errors.Refused(
            "This alert is no longer kept: gatehouse reconcile-claim --uncertain settles "
            "what is left."
        ) from None
    alert = payloads.Alert.of(row)
    if alert.about != "claims_uncertain":
        raise errors.Refused("This button names no uncertain claims: nothing was done.")
    return [int(claim_id) for claim_id in alert.facts["claim_ids"]]


async def settle(tap: kit.Tap) -> None:
    """Not charged / Charged: settle the alert's claims still uncertain, in one transaction."""
    d, user = tap.deps, tap.user
    if not d.may_settle(user):
        await tap.query.answer(
            "Only the operators in GATEHOUSE_TELEGRAM__SETTLERS may settle money: nothing "
            "was done.",
            show_alert=True,
        )
        return
    claim_ids = await episode(d.store, tap.button.item_id)
    at, label = _AT[tap.button.action]
    done = await operations.settle_uncertain(
        d.store,
        at,
        f"{label}, tapped under alert {tap.button.item_id}",
        events.operator(user),
        tap.now,
        claim_ids=claim_ids,
    )
    if not done.settled:
        await tap.query.answer(
            f"Nothing changed: the {wording.plural(len(claim_ids), 'claim')} of this alert "
            "were settled already.",
            show_alert=True,
        )
        return
    said = (
        f"{wording.plural(len(done.settled), 'claim')} settled at {units.usd(done.micros)} "
        f"({label.lower()})"
    )
    if done.already:
        said += f"; {len(done.already)} settled already, left as they were"
    await tap.query.answer(actions.short(said))
    await actions.tapped(tap.query).reply_text(f"💸 {said}; the items waiting go on by themselves.")


async def listed(tap: kit.Tap) -> None:
    """List: each claim of the alert with its item and what it holds or cost."""
    d = tap.deps
    claim_ids = await episode(d.store, tap.button.item_id)
    found = await d.store.read(_claims_sync, claim_ids)
    lines = [f"💸 {wording.plural(len(found), 'claim')} of this alert:"]
    lines += [_line(claim) for claim in found]
    await tap.query.answer()
    message = actions.tapped(tap.query)
    for part in telegram_text.split(render.esc("\n".join(lines))):
        await message.reply_text(part, parse_mode=ParseMode.HTML)


def _claims_sync(conn: backend.Conn, claim_ids: list[int]) -> list[claims.Claim]:
    return [claims.get_sync(conn, claim_id) for claim_id in claim_ids]


def _line(claim: claims.Claim) -> str:
    item = f"item {claim.item_id}" if claim.item_id is not None else "no item"
    if claim.state == "uncertain":
        money = f"{units.usd(claim.reserved_micros)} held, uncertain"
    else:
        money = f"{claim.state} at {units.usd(claim.actual_micros or 0)}"
    return f"• claim {claim.id} · {claim.pipeline} {item} · {money}"
