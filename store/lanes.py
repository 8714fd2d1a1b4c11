"""One sqlite3 connection owned by one thread, fed work in order.

This is aiosqlite's model (one connection, one thread, one ordered queue) with
one difference that matters for speed: a caller hands over a whole unit of work
(`fn(conn, *args)`, usually a complete transaction) in ONE round trip, instead of
one await per statement. Each round trip costs ~40 µs; a transaction as four
awaits ran at 0.37x plain sqlite3 here, as one unit at 0.73x (shared/NOTES.md).
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, TypeVar

from store import errors

T = TypeVar("T")
P = ParamSpec("P")


class Lane:
    """A connection and the single thread that owns it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._conn: sqlite3.Connection | None = None

    async def open(self, connect: Callable[[], sqlite3.Connection]) -> None:
        """Create the connection on the lane's own thread (sqlite3 binds it there)."""

        def opener() -> None:
            self._conn = connect()

        await self._submit(opener)

    async def run(
        self, fn: Callable[Concatenate[sqlite3.Connection, P], T], *args: P.args, **kw: P.kwargs
    ) -> T:
        """Run `fn(conn, *args)` on the lane's thread; driver errors become StoreError."""
        return await self._submit(functools.partial(self._call, fn, *args, **kw))

    def _call(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        if self._conn is None:
            raise errors.Closed()
        try:
            return fn(self._conn, *args, **kw)
        except sqlite3.Error as exc:
            raise errors.translate(exc) from exc

    async def _submit(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn)

    async def close(self) -> None:
        def closer() -> None:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                conn.close()

        try:
            await self._submit(closer)
        finally:
            self._executor.shutdown(wait=True)
