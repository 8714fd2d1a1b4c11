"""Who may talk to the bot: the operator allow-list and a per-operator rate limit.

    gate = auth.Gate(operators={42, 43}, per_minute=30)
    verdict = gate.check(user_id, now)      # "operator", "stranger" or "limited"

Strangers are counted and logged by id only, never with what they sent: their text is
untrusted and may carry anything (python-telegram-bot's own DEBUG dumps of updates are
cut down to ids by `bot.ground.logs.HideUpdates`). The app runs the check once per
update, before any handler, so no handler can forget it.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Literal

log = logging.getLogger(__name__)

Verdict = Literal["operator", "stranger", "limited"]
#: The sliding window of the per-operator rate limit.
WINDOW = timedelta(minutes=1)


class Gate:
    """The allow-list check and per-operator sliding-window rate limit."""

    def __init__(self, operators: Iterable[int], per_minute: int) -> None:
        self.operators = frozenset(operators)
        if not self.operators:
            raise ValueError("no operators configured: set GATEHOUSE_TELEGRAM__OPERATORS")
        self.per_minute = per_minute
        #: Updates ignored because they came from someone not on the allow-list.
        self.strangers = 0
        #: Operator updates refused by the rate limit.
        self.limited = 0
        self._recent: dict[int, collections.deque[datetime]] = {}

    def check(self, user_id: int | None, now: datetime) -> Verdict:
        if user_id is None or user_id not in self.operators:
            self.strangers += 1
            log.warning(
                "ignored an update from non-operator %s (%d so far)", user_id, self.strangers
            )
            return "stranger"
        if self.per_minute <= 0:
            return "operator"
        recent = self._recent.setdefault(user_id, collections.deque())
        while recent and now - recent[0] >= WINDOW:
            recent.popleft()
        if len(recent) >= self.per_minute:
            self.limited += 1
            log.info("operator %d is over %d actions per minute", user_id, self.per_minute)
            return "limited"
        recent.append(now)
        return "operator"
