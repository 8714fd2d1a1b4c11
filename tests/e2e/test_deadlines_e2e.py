"""Deadlines an operator can act on, end to end with a clock the test moves: the real bot
against the local Bot API server. The SLA warning is a reply to the card with Approve,
Reject and Extend; Extend works once; an expired card says so and offers Replay."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from bot.demo.botapi import localapi
from store import items
from store.items.machine import State
from tests.e2e import test_bot_e2e as e2e
from tests.e2e.test_nudges_e2e import BROUGHT_IN, OPERATOR, answers, card_texts, running, tap, trail
from tests.fakes.feed_server import FeedServer

RULES = "  window: 1h"


def warnings(api: localapi.LocalBotApi, item_id: int) -> list[Any]:
    return [m for m in api.sent(OPERATOR) if f"⏳ item {item_id} " in m.text]


def latest(api: localapi.LocalBotApi, message: Any) -> Any:
    return api.history(OPERATOR, message.message_id)[-1]


def labels(message: Any) -> list[str]:
    markup = message.reply_markup or {"inline_keyboard": []}
    return [key["text"] for row in markup["inline_keyboard"] for key in row]


async def test_a_warning_can_be_acted_on_and_an_expired_card_replayed(
    tmp_path: Path, feed: FeedServer
) -> None:
    async with running(tmp_path, feed, RULES, sweep_every_s=0.2) as bot:
        api = bot.api
        first, second = await api.await_for(
            lambda: card_texts(api, OPERATOR)[1:] and card_texts(api, OPERATOR)[:2], timeout=60
        )
        item_a, item_b = e2e.item_id_of(first), e2e.item_id_of(second)

        # 80 % of the window gone: each card gets a warning as a reply, in words.
        bot.clock.offset = timedelta(minutes=49)
        warning_a = (await api.await_for(lambda: warnings(api, item_a), timeout=20))[0]
        warning_b = (await api.await_for(lambda: warnings(api, item_b), timeout=20))[0]
        assert warning_a.reply_to_message_id == first.message_id
        assert warning_b.reply_to_message_id == second.message_id
        assert f"item {item_a} (news) is waiting for approval, " in warning_a.text
        assert re.search(r", \d+ min( \d+ s)? left$", warning_a.text), warning_a.text
        assert "awaiting_approval" not in warning_a.text
        assert labels(warning_a) == ["✅ Approve", "❌ Reject", "⏳ Extend"]

        # Approve from the warning: the card shows it, the warning loses its buttons.
        assert (await tap(api, warning_b, "Approve"))["text"] == "✅ approved"
        await api.await_for(lambda: "approved by" in latest(api, second).text, timeout=10)
        await api.await_for(lambda: latest(api, warning_b).reply_markup is None, timeout=10)
        # ...and no longer counts down: it says what happened.
        await api.await_for(lambda: "approved by" in latest(api, warning_b).text, timeout=10)
        assert "left" not in latest(api, warning_b).text

        # Extend: the window once more, written as an event, said on the card.
        answer = await tap(api, warning_a, "Extend")
        assert answer["text"].startswith("⏳ extended: ") and "left to decide" in answer["text"]
        extended = (await trail(bot, item_a))[-1]
        assert extended.actor == f"operator:{OPERATOR}"
        assert extended.reason is not None and extended.reason.startswith("window extended by 1 h")
        await api.await_for(lambda: "window extended by 1 h" in latest(api, first).text, timeout=10)
        assert labels(latest(api, first))[:2] == ["✅ Approve", "❌ Reject"]  # still open
        await api.await_for(lambda: latest(api, warning_a).reply_markup is None, timeout=10)
        await api.await_for(lambda: "extended by 1 h" in latest(api, warning_a).text, timeout=10)

        # The extended window warns again; a second Extend is refused, nothing changes.
        bot.clock.offset = timedelta(minutes=100)
        again = await api.await_for(lambda: warnings(api, item_a)[1:], timeout=20)
        before = await trail(bot, item_a)
        refused = await tap(api, again[0], "Extend")
        assert "extended once already" in refused["text"] and refused["show_alert"]
        assert len(await trail(bot, item_a)) == len(before)

        # Past the new deadline: the card says it expired, and offers Replay.
        bot.clock.offset = timedelta(minutes=121)
        expired = await api.await_for(
            lambda: "⌛ expired at" in latest(api, first).text and latest(api, first), timeout=20
        )
        assert "nobody decided within the approval window" in expired.text
        assert labels(expired) == ["🔁 Replay"]
        assert (await items.get(bot.runtime.store, item_a)).state == State.EXPIRED
        # The second warning, never acted on, loses its buttons and says it expired.
        settled = await api.await_for(
            lambda: "expired" in latest(api, again[0]).text and latest(api, again[0]), timeout=10
        )
        assert settled.reply_markup is None and "left" not in settled.text
        # The alert about it went where its card is: to the approver. Someone who is
        # not one (an operator of the bot, seeing it in a shared chat) is refused.
        expiry = await api.await_for(
            lambda: [m for m in api.sent(OPERATOR) if f"🚨 item {item_a} (news)" in m.text],
            timeout=20,
        )
        other = api.inject_callback(
            OPERATOR, BROUGHT_IN, expiry[0].message_id, e2e.button(expiry[0], "Replay")
        )
        said = await api.await_for(lambda: answers(api, other), timeout=10)
        assert "not an approver" in said[0]["text"] and said[0]["show_alert"]
        assert (await items.get(bot.runtime.store, item_a)).state == State.EXPIRED
        replayed = await tap(api, expired, "Replay")
        assert replayed["text"] == "replayed: attempt 2"
        fresh = await api.await_for(
            lambda: [m for m in card_texts(api, OPERATOR) if f"item {item_a}\n" in m.text
                     and "attempt 2" in m.text],
            timeout=30,
        )  # fmt: skip
        assert fresh[0].message_id != first.message_id
        replay_event = [e for e in await trail(bot, item_a) if e.to_state == State.NEW][-1]
        assert replay_event.actor == f"operator:{OPERATOR}"
        # The breach-style alert about the expiry replied to the card with Replay too;
        # that offer is now out of date.
        alert = [m for m in api.sent(OPERATOR) if f"🚨 item {item_a} (news): expired" in m.text]
        assert alert and alert[0].reply_to_message_id == first.message_id
        stale = api.inject_callback(
            OPERATOR, OPERATOR, alert[0].message_id, e2e.button(alert[0], "Replay")
        )
        found = await api.await_for(lambda: answers(api, stale), timeout=10)
        assert "out of date" in found[0]["text"]
        # Nothing about the item reached the operator who does not approve news.
        assert not [m for m in api.sent(BROUGHT_IN) if f"item {item_a} " in m.text]
