"""One route for every card button: ROUTES maps each action to its handler, behind one
preamble that every tap passes (bot.app registers `tap` as the one CallbackQueryHandler).

The preamble verifies the button's tag before anything is read, so a forged button
changes nothing; for an item's button it reads the item and checks its pipeline is still
configured; a refusal from any handler is answered in one place. Adding a button:

    1. its action and one-letter code in bot.ground.callbacks (Action and _CODES);
    2. its handler, `async def name(tap: kit.ItemTap) -> None` (or `kit.Tap`
       for a button whose item_id names something else, as a listed set's do);
    3. one line here: `"name": OnItem(module.name),` (or `OnList(...)`).

tests/bot/test_card_routes.py fails until every action has its route.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from telegram import Update

from bot.cards import actions, review_handlers, taps, uncertain
from bot.chat import kit
from bot.ground import callbacks
from store import errors, items


@dataclass(frozen=True)
class OnItem:
    """The button names an item: its handler gets the item and its pipeline."""

    handle: Callable[[kit.ItemTap], Awaitable[None]]


@dataclass(frozen=True)
class OnList:
    """The button names a listed set (item_id is the list's id, version its count), or
    an alert's uncertain claims (item_id is the alert's outbox row)."""

    handle: Callable[[kit.Tap], Awaitable[None]]


ROUTES: dict[callbacks.Action, OnItem | OnList] = {
    "approve": OnItem(taps.approve),
    "approve_anyway": OnItem(taps.approve_anyway),
    "edit": OnItem(taps.ask_for_edit),
    "noimage": OnItem(taps.remove_image),
    "extend": OnItem(taps.extend),
    "escalate": OnItem(taps.escalate),
    "retry": OnItem(taps.retry),
    "show": OnItem(taps.show),
    "replay": OnItem(taps.replay),
    "fresh": OnItem(taps.replay),
    "reject": OnItem(review_handlers.reasons),
    "back": OnItem(review_handlers.back),
    "other": OnItem(review_handlers.other),
    "why": OnItem(review_handlers.why),
    "undo": OnItem(review_handlers.undo),
    "redraft": OnItem(review_handlers.redraft),
    "all_approve": OnList(review_handlers.confirm),
    "all_reject": OnList(review_handlers.confirm),
    "cancel": OnList(review_handlers.cancel),
    "yes_approve": OnList(review_handlers.decide_listed),
    "yes_reject": OnList(review_handlers.decide_listed),
    "not_charged": OnList(uncertain.settle),
    "charged": OnList(uncertain.settle),
    "list_claims": OnList(uncertain.listed),
}
#: What a tap on a button with no route is answered (a newer bot's, after a downgrade).
NO_ROUTE = "This button is no longer offered: nothing was done."


async def tap(update: Update, context: kit.Context) -> None:
    """Any button: verify its tag, find its route, read what it names, then act."""
    query = update.callback_query
    assert query is not None
    d = kit.deps(context)
    now = d.clock()
    button = await kit.verified_button(query, d.key)
    if button is None:
        return
    route = ROUTES.get(button.action)
    if route is None:
        await query.answer(NO_ROUTE, show_alert=True)
        return
    try:
        if isinstance(route, OnList):
            await route.handle(kit.Tap(query, d, button, now))
            return
        item = await items.get(d.store, button.item_id)
        pipeline = d.pipelines.get(item.pipeline)
        if pipeline is None:
            await query.answer(f"pipeline {item.pipeline} is no longer configured")
            return
        await route.handle(kit.ItemTap(query, d, button, now, item, pipeline))
    except errors.Refused as exc:
        await query.answer(actions.short(str(exc)), show_alert=True)
