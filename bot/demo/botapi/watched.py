"""The local Bot API server's one lock and its waits, which every change wakes.

Every change bumps `revision` and wakes all waiters; closing wakes them for good.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Watched:
    """One `threading.Condition` over a state, and the ways to wait on it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()  # an RLock underneath: predicates may re-enter
        self._closed = False
        self.revision = 0

    @property
    def lock(self) -> threading.Condition:
        """Held to change the groups from outside (the server's control methods)."""
        return self._cond

    def _changed(self) -> None:
        self.revision += 1
        self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter for good: long polls return empty, waits stop."""
        with self._cond:
            self._closed = True
            self._changed()

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the server closes."""
        deadline = time.monotonic() + seconds
        with self._cond:
            while not self._closed and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)

    def summary(self) -> str:
        """What a wait that timed out says of the state."""
        return ""

    def wait_for(self, predicate: Callable[[], T], timeout: float) -> T:
        """Wait until `predicate()` is truthy and return it; TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not (result := predicate()):
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise TimeoutError(f"condition not met within {timeout} s; {self.summary()}")
                self._cond.wait(left)
            return result

    def wait_revision(self, after: int, timeout: float) -> int:
        """Wait until anything changes past revision `after`; return the current revision."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.revision <= after and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return self.revision
