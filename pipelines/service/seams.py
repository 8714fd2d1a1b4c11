"""What a worker uses of the runtime, one Protocol per need, so a worker's signature says
what it touches instead of taking the whole `Runtime`:

    async def worker(runtime: seams.Piped, stop: asyncio.Event) -> None:
        await sweep(runtime.store, runtime.pipelines, runtime.now())

`Runtime` (pipelines.service.runtime) has all of them; each is read-only, so a test may
hand a worker anything of the same shape.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from store.cluster import heartbeats
from store.db import Store

if TYPE_CHECKING:  # types only: any worker may import this module without the engine's
    import httpx

    from pipelines.config import spec
    from pipelines.service.runtime import RuntimeConfig
    from pipelines.service.scheduler import Scheduler
    from pipelines.service.workers import Registry


class Stored(Protocol):
    """The store and the runtime's clock."""

    @property
    def store(self) -> Store: ...

    def now(self) -> datetime: ...


class Piped(Stored, Protocol):
    """The store, the clock and the pipelines loaded."""

    @property
    def pipelines(self) -> dict[str, spec.Pipeline]: ...


class Watched(Piped, Protocol):
    """What the metrics and a health check read: the pipelines and the workers' states."""

    @property
    def workers(self) -> Registry: ...


class Controlled(Watched, Protocol):
    """What the control socket drives: runs through the scheduler, files that failed to load."""

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def loaded(self) -> spec.LoadResult: ...


class Dispatching(Watched, Protocol):
    """What the dispatch worker uses of the runtime: its HTTP client, who it is, its lease."""

    @property
    def client(self) -> httpx.AsyncClient: ...

    @property
    def me(self) -> heartbeats.Me: ...

    @property
    def config(self) -> RuntimeConfig: ...
