"""Every card button has one route: each action the keyboards make has exactly one
handler, a button with no route is refused with an answer, and a button sent before an
upgrade still routes."""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from telegram import Bot, Update
from telegram.ext import CallbackQueryHandler

from bot import app
from bot import settings as settings_mod
from bot.cards import routes
from bot.chat import auth, kit, sender
from bot.demo.botapi import localapi
from bot.ground import callbacks
from store import db, items
from tests.pipelines.test_review import pipeline

TOKEN = "555333:card-routes-test-token_abcdefghijklm"
KEY = b"k" * 32
OPERATOR = 1001
#: A Show card button for item 1 (attempt 1, version 1) under KEY, as cards already sent
#: carry it: written out, so a change to the layout or the tag fails here.
OLD_SHOW = "1:s:1:1:1:b21FhqIv6RGIdVAi"
LISTED = {"all_approve", "all_reject", "yes_approve", "yes_reject", "cancel"} | {
    "not_charged", "charged", "list_claims",
}  # fmt: skip


def test_every_action_the_keyboards_make_has_exactly_one_route() -> None:
    declared = typing.get_args(callbacks.Action)
    assert len(declared) == len(set(declared))
    assert sorted(routes.ROUTES) == sorted(declared)
    # A listed set's buttons name a list, every other one an item.
    on_list = {a for a, r in routes.ROUTES.items() if isinstance(r, routes.OnList)}
    assert on_list == LISTED


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


@pytest.fixture
async def application(
    tmp_path: Path, api: localapi.LocalBotApi, store: db.Store, bot: Bot, now: datetime
) -> AsyncIterator[app.App]:
    """The bot's own application (its handlers as bot.app registers them) on the local API."""
    (tmp_path / "pipelines").mkdir()
    cfg = settings_mod.Settings(
        data_dir=tmp_path / "data",
        pipelines_dir=tmp_path / "pipelines",
        telegram=settings_mod.TelegramSettings(
            token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
            base_url=api.base_url,
            operators=[OPERATOR],
        ),
    )
    built = app.build(cfg, TOKEN)
    built.bot_data["deps"] = kit.Deps(
        store, {"news": pipeline()}, None, auth.Gate([OPERATOR], 0), KEY,
        sender.Sender(store, bot, lambda row: [], lambda row: None), lambda: now,
    )  # fmt: skip
    async with built:
        yield built


async def tap(application: app.App, api: localapi.LocalBotApi, bot: Bot, data: str) -> Any:
    """Tap a button with `data` under a message in the operator's chat; its answer."""
    message = await bot.send_message(OPERATOR, "a card")
    query_id = api.inject_callback(OPERATOR, OPERATOR, message.message_id, data)
    raw = {"update_id": int(query_id), "callback_query": api.state.callback_query(query_id)}
    await application.process_update(Update.de_json(raw, application.bot))
    return next(a for a in api.callback_answers() if a["callback_query_id"] == query_id)


def test_the_bot_registers_one_handler_for_every_button(application: app.App) -> None:
    taps = [
        h for group in application.handlers.values() for h in group
        if isinstance(h, CallbackQueryHandler)
    ]  # fmt: skip
    assert [h.callback for h in taps] == [routes.tap]


async def test_a_button_sent_before_an_upgrade_still_routes(
    application: app.App, api: localapi.LocalBotApi, bot: Bot, store: db.Store, now: datetime
) -> None:
    item = await store.write(items.create_sync, "news", "s", "g1", {"title": "T"}, now)
    assert item is not None and item.id == 1
    answer = await tap(application, api, bot, OLD_SHOW)
    # Show card's own answer: the item was read and its handler ran.
    assert answer["text"] == "item 1 is new; its card is gone"


async def test_a_button_with_no_route_is_refused_with_an_answer(
    application: app.App,
    api: localapi.LocalBotApi,
    bot: Bot,
    store: db.Store,
    now: datetime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    item = await store.write(items.create_sync, "news", "s", "g1", {"title": "T"}, now)
    assert item is not None
    monkeypatch.delitem(routes.ROUTES, "fresh")
    data = callbacks.encode(KEY, callbacks.Button("fresh", item.id, 1, 0))
    answer = await tap(application, api, bot, data)
    assert (answer["text"], answer["show_alert"]) == (routes.NO_ROUTE, True)
    assert (await items.get(store, item.id)).attempt == 1  # nothing replayed


async def test_a_forged_button_is_answered_and_reads_nothing(
    application: app.App, api: localapi.LocalBotApi, bot: Bot
) -> None:
    answer = await tap(application, api, bot, OLD_SHOW[:-1] + "A")
    assert "not made by this bot" in answer["text"]
