"""The buttons under an alert about uncertain claims, through the real sender, the bot's
own handlers and the local Bot API server: Not charged settles every claim of the episode
at $0, Charged at what each held, List shows them; a tap on a stale alert changes
nothing and says so, and an operator who may not settle money is refused."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from telegram import Bot, Update

from bot import app
from bot import settings as settings_mod
from bot.chat import auth, kit, sender
from bot.demo.botapi import localapi
from bot.process import outbox_routes
from store import db, ledger
from tests.pipelines.test_review import pipeline

TOKEN = "555444:uncertain-buttons-token_abcdefghijklm"
KEY = b"k" * 32
OPERATOR, CLERK = 1001, 1002
LEASE = timedelta(minutes=5)


@pytest.fixture
def api() -> Iterator[localapi.LocalBotApi]:
    with localapi.LocalBotApi(token=TOKEN) as server:
        yield server


@pytest.fixture
async def application(
    tmp_path: Path, api: localapi.LocalBotApi, store: db.Store, bot: Bot, now: datetime
) -> AsyncIterator[app.App]:
    """The bot's own application on the local API; only OPERATOR may settle money."""
    (tmp_path / "pipelines").mkdir()
    cfg = settings_mod.Settings(
        data_dir=tmp_path / "data",
        pipelines_dir=tmp_path / "pipelines",
        telegram=settings_mod.TelegramSettings(
            token=TOKEN,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
            base_url=api.base_url,
            operators=[OPERATOR, CLERK],
        ),
    )
    built = app.build(cfg, TOKEN)
    built.bot_data["deps"] = kit.Deps(
        store, {"news": pipeline()}, None, auth.Gate([OPERATOR, CLERK], 0), KEY,
        sender.Sender(store, bot, lambda row: [], lambda row: None), lambda: now,
        settlers=frozenset({OPERATOR}),
    )  # fmt: skip
    async with built:
        yield built


async def cut_off(store: db.Store, now: datetime, count: int) -> list[int]:
    """`count` calls a stop cut off, and the alert claim recovery queued for them."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), "cli", now)
    ids = []
    for n in range(count):
        work = await ledger.begin(
            store,
            ledger.Call(f"k{n}", "llm.draft", {"n": n}, 1_000 * (n + 1), "news", None, LEASE),
            now,
        )
        await ledger.start_provider(store, work.id, now)
        ids.append(work.id)
    await ledger.recover(store, now + LEASE)
    return ids


async def sent_alert(store: db.Store, bot: Bot, api: localapi.LocalBotApi, now: datetime) -> Any:
    """The alert as the bot's sender sends it, with the keyboard bot.app builds."""
    runtime: Any = types.SimpleNamespace(pipelines={})
    keyboard = outbox_routes.keyboard(KEY, runtime)
    out = sender.Sender(store, bot, lambda row: [OPERATOR, CLERK], keyboard, clock=lambda: now)
    assert await out.send_due(now + LEASE) == 1
    [message] = [m for m in api.sent(OPERATOR) if m.text.startswith("💸")]
    return message


def buttons(message: Any) -> dict[str, str]:
    [row] = message.reply_markup["inline_keyboard"]
    return {b["text"]: b["callback_data"] for b in row}


async def tap(
    application: app.App, api: localapi.LocalBotApi, message: Any, label: str, user: int = OPERATOR
) -> Any:
    """`user` taps the button `label` under `message` (in OPERATOR's chat); its answer."""
    query_id = api.inject_callback(OPERATOR, user, message.message_id, buttons(message)[label])
    raw = {"update_id": int(query_id), "callback_query": api.state.callback_query(query_id)}
    await application.process_update(Update.de_json(raw, application.bot))
    return next(a for a in api.callback_answers() if a["callback_query_id"] == query_id)


async def states(store: db.Store, ids: list[int]) -> list[tuple[str, int | None]]:
    found = [await ledger.get(store, claim_id) for claim_id in ids]
    return [(c.state, c.actual_micros) for c in found]


async def test_not_charged_settles_the_episode_at_zero_and_a_second_tap_changes_nothing(
    application: app.App, api: localapi.LocalBotApi, bot: Bot, store: db.Store, now: datetime
) -> None:
    ids = await cut_off(store, now, 3)
    message = await sent_alert(store, bot, api, now)
    assert message.text.startswith("💸 3 calls were cut off") and "$0.006 held" in message.text
    assert list(buttons(message)) == ["🆓 Not charged", "💵 Charged", "📋 List"]

    answer = await tap(application, api, message, "🆓 Not charged")
    assert answer["text"] == "3 claims settled at $0.00 (not charged)"
    assert await states(store, ids) == [("settled", 0)] * 3
    [budget] = (await ledger.report(store, now)).budgets
    assert (budget.spent_micros, budget.held_micros) == (0, 0)
    said = api.sent(OPERATOR)[-1].text
    assert (
        said == "💸 3 claims settled at $0.00 (not charged); the items waiting go on by themselves."
    )

    stale = await tap(application, api, message, "💵 Charged")
    assert (stale["text"], stale["show_alert"]) == (
        "Nothing changed: the 3 claims of this alert were settled already.",
        True,
    )
    assert await states(store, ids) == [("settled", 0)] * 3


async def test_charged_settles_each_claim_at_what_it_held(
    application: app.App, api: localapi.LocalBotApi, bot: Bot, store: db.Store, now: datetime
) -> None:
    ids = await cut_off(store, now, 2)
    message = await sent_alert(store, bot, api, now)
    answer = await tap(application, api, message, "💵 Charged")
    assert answer["text"] == "2 claims settled at $0.003 (charged)"
    assert await states(store, ids) == [("settled", 1_000), ("settled", 2_000)]


async def test_list_shows_each_claim_with_its_item_and_amount(
    application: app.App, api: localapi.LocalBotApi, bot: Bot, store: db.Store, now: datetime
) -> None:
    ids = await cut_off(store, now, 2)
    message = await sent_alert(store, bot, api, now)
    await ledger.reconcile(store, ids[0], ledger.Actual(700, "invoice 7"), "cli", now + LEASE)
    await tap(application, api, message, "📋 List")
    assert api.sent(OPERATOR)[-1].text == (
        "💸 2 claims of this alert:\n"
        f"• claim {ids[0]} · news no item · settled at $0.0007\n"
        f"• claim {ids[1]} · news no item · $0.002 held, uncertain"
    )


async def test_an_operator_who_may_not_settle_money_changes_nothing(
    application: app.App, api: localapi.LocalBotApi, bot: Bot, store: db.Store, now: datetime
) -> None:
    ids = await cut_off(store, now, 2)
    message = await sent_alert(store, bot, api, now)
    answer = await tap(application, api, message, "🆓 Not charged", user=CLERK)
    assert "Only the operators in GATEHOUSE_TELEGRAM__SETTLERS may settle money" in answer["text"]
    assert await states(store, ids) == [("uncertain", None)] * 2
