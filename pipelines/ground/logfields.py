"""The fields a log record carries about what is being worked on: pipeline, run, item,
attempt, outbox row. Structured logs (GATEHOUSE_LOG_FORMAT=json) write them as keys.

    with logfields.bound(pipeline="news", run=12):
        log.info("fetched")          # {"message": "fetched", "pipeline": "news", "run": 12, ...}
    logfields.tag(item=3)            # for the rest of this asyncio task

A context variable, so each asyncio task sees the fields of the work it does, and tasks
started inside a bound block (a run's drafting) inherit them.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

#: Every field name a record may carry, in the order JSON lines show them.
FIELDS = ("pipeline", "run", "item", "attempt", "outbox")

_current: contextvars.ContextVar[dict[str, object]] = contextvars.ContextVar("log_fields")


def current() -> dict[str, object]:
    return _current.get({})


def _check(fields: dict[str, object]) -> None:
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log fields {sorted(unknown)}; valid: {', '.join(FIELDS)}")


def tag(**fields: object) -> None:
    """Add fields for the rest of the current task (and the tasks it starts)."""
    _check(fields)
    _current.set({**current(), **fields})


@contextlib.contextmanager
def bound(**fields: object) -> Iterator[None]:
    """Add fields inside the block only."""
    _check(fields)
    token = _current.set({**current(), **fields})
    try:
        yield
    finally:
        _current.reset(token)
