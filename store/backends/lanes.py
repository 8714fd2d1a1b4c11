"""One database connection owned by one thread, fed work in order.

This is aiosqlite's model (one connection, one thread, one ordered queue) with
one difference that matters for speed: a caller hands over a whole unit of work
(`fn(conn, *args)`, usually a complete transaction) in ONE round trip, instead of
one await per statement, so a transaction pays for one trip through the event loop
rather than one per statement. The thread and its queue are our own rather than an
executor's, whose round trip costs more.

The thread hands each result to a callback on the loop's thread. `run` awaits it
through a future; `start` takes the callback itself, so the single writer answers its
callers in the turn the commit's result arrives rather than one turn later.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar

from store import errors

T = TypeVar("T")
P = ParamSpec("P")


class _Connection(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Connection)

#: What the lane's thread hands back: `done(result, None)` or `done(None, exception)`.
Done = Callable[[Any, "BaseException | None"], None]
_Job = tuple[asyncio.AbstractEventLoop, Callable[[], Any], Done]


def _translate_sqlite(exc: Exception) -> errors.StoreError | None:
    return errors.translate(exc) if isinstance(exc, sqlite3.Error) else None


class Lane(Generic[C]):
    """A connection and the single thread that owns it.

    `translate` maps the driver's exceptions to the store's (None: not the driver's).
    """

    def __init__(
        self,
        name: str,
        translate: Callable[[Exception], errors.StoreError | None] = _translate_sqlite,
    ) -> None:
        self._translate = translate
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # A daemon: a process that ends without closing its store must not hang on it.
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()
        self._conn: C | None = None

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, fn, done = job
            try:
                result, error = fn(), None
            except BaseException as exc:
                result, error = None, exc
            # A closed event loop raises RuntimeError: nobody is left to tell.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(done, result, error)

    async def open(self, connect: Callable[[], C]) -> None:
        """Create the connection on the lane's own thread (sqlite3 binds it there)."""

        def opener() -> None:
            self._conn = connect()

        await self._awaited(opener)

    async def run(self, fn: Callable[Concatenate[C, P], T], *args: P.args, **kw: P.kwargs) -> T:
        """Run `fn(conn, *args)` on the lane's thread; driver errors become StoreError."""
        return await self._awaited(functools.partial(self._with_conn, fn, *args, **kw))

    def start(self, done: Done, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(conn, *args)` on the lane's thread, then `done(result, error)` on the
        loop's, in the very turn the result arrives (driver errors become StoreError).

        `run` awaits a future, whose waiter resumes one loop turn after that: a caller
        that settles other futures from `done` saves them that turn."""
        self._put(functools.partial(self._with_conn, fn, *args), done)

    def _with_conn(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        if self._conn is None:
            raise errors.Closed()
        return fn(self._conn, *args, **kw)

    async def _awaited(self, fn: Callable[[], T]) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._put(fn, functools.partial(_settle, future))
        return await future

    def _put(self, fn: Callable[[], Any], done: Done) -> None:
        """Queue `fn()` for the lane's thread; driver errors (connecting too) become StoreError."""

        def guarded() -> Any:
            try:
                return fn()
            except Exception as exc:
                translated = self._translate(exc)
                if translated is None:
                    raise
                raise translated from exc

        if not self._thread.is_alive():
            raise errors.Closed()
        self._jobs.put((asyncio.get_running_loop(), guarded, done))

    async def close(self) -> None:
        def closer() -> None:
            if self._conn is not None:
                conn, self._conn = self._conn, None
                conn.close()

        if self._thread.is_alive():
            await self._awaited(closer)
            self._jobs.put(None)
            await asyncio.to_thread(self._thread.join)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled; nobody waits for this result
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
