"""A failure that repeats, logged as one episode: its first failure, then at most one
line a minute while it lasts, then one line when the work succeeds again.

    failures = episodes.Episode(log, "checkpoint failed", "checkpoints work again")
    try:
        step()
    except errors.StoreError as exc:
        failures.failed(exc, loop.time())
    else:
        failures.worked()

A loop that retries every few milliseconds (the checkpointer, the sealer) meets a full
disk hundreds of times a second: one line per try buried everything else in the log
(1,037 lines in 22 s). Time is a parameter (seconds on any monotonic clock), so tests
choose it.
"""

from __future__ import annotations

import logging

#: Seconds between two lines about one ongoing failure: the operator learns it lasts
#: without reading a line per retry.
REPEAT_EVERY_S = 60.0


class Episode:
    """The log lines of one repeating failure, from its first try to its recovery."""

    def __init__(
        self,
        log: logging.Logger,
        failing: str,
        working: str,
        *,
        every_s: float = REPEAT_EVERY_S,
    ) -> None:
        self._log = log
        #: "checkpoint failed": the first line, and the repeats', before the error.
        self._failing = failing
        #: "checkpoints work again": the recovery's line, before the count.
        self._working = working
        self._every_s = every_s
        #: Failures since the episode began (0: none is going on).
        self.failures = 0
        #: Failures since the last line about them, and when that line was written.
        self._unsaid = 0
        self._said_at = 0.0

    def failed(self, exc: BaseException, now: float) -> None:
        """One more failure: logged if it begins the episode or a minute has passed."""
        self.failures += 1
        if self.failures == 1:
            self._log.warning("%s: %s (while it lasts, one line a minute)", self._failing, exc)
        elif now - self._said_at >= self._every_s:
            self._log.warning(
                "%s again: %s (%d failures in a row, %d since the last line)",
                self._failing,
                exc,
                self.failures,
                self._unsaid + 1,
            )
        else:
            self._unsaid += 1
            return
        self._unsaid = 0
        self._said_at = now

    def worked(self) -> None:
        """The work succeeded: the episode, if one was going on, ends with one line."""
        if self.failures:
            plural = "" if self.failures == 1 else "s"
            self._log.info("%s after %d failure%s", self._working, self.failures, plural)
        self.failures = 0
        self._unsaid = 0
