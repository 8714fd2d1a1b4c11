"""A real runtime with its control socket listening, for tests that talk to it as the CLI does."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from bot.process import control
from pipelines.service import runtime as runtime_mod
from store import db


@contextlib.asynccontextmanager
async def with_control(data_dir: Path, pipelines_dir: Path) -> AsyncIterator[runtime_mod.Runtime]:
    cfg = runtime_mod.RuntimeConfig(
        store=db.StoreConfig(data_dir=data_dir),
        pipelines_dir=pipelines_dir,
        workers=(control.serve,),
    )
    started = await runtime_mod.Runtime.start(cfg)
    sock = control.socket_path(data_dir)
    for _ in range(200):  # the worker binds on its first turn of the loop
        if sock.exists():
            break
        await asyncio.sleep(0.01)
    try:
        yield started
    finally:
        await started.stop()
