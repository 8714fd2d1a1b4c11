"""Waiting in a loop that must stop at once when told: the kit every long-running loop uses.

await waiting.wait_any((woken, stop), 30.0)        # whichever comes first, or 30 s
await waiting.set_when_any(stop, (lost, closing))  # stop as soon as either is set
reason = waiting.describe(exc)                     # "Type: message", shortened
"""

from __future__ import annotations

import asyncio

#: The longest exception text kept in a state or a row's reason (characters).
MAX_ERROR_CHARS = 300


def describe(exc: BaseException) -> str:
    """`Type: message`, shortened, for a log line, a state or a parked row's reason."""
    text = f"{type(exc).__name__}: {exc}".strip().removesuffix(":")
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


async def wait_any(events: tuple[asyncio.Event, ...], seconds: float) -> None:
    """Return when any of `events` is set, or after `seconds`."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


async def set_when_any(target: asyncio.Event, events: tuple[asyncio.Event, ...]) -> None:
    """Set `target` as soon as any of `events` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
    target.set()
