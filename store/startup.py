"""What the writer does once at startup, before any new work: recover from a crash."""

from __future__ import annotations

import logging
from datetime import datetime

from store import runs
from store.db import Store

log = logging.getLogger(__name__)


async def recover(store: Store, now: datetime) -> None:
    """Close the books a crash left open."""
    interrupted = await runs.close_interrupted(store, now)
    if interrupted:
        log.warning(
            "%d run(s) were interrupted by a crash and are now recorded as errors", interrupted
        )
