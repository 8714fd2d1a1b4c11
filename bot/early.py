"""`gatehouse run` before anything slow: take the single-writer lock, then import the bot.

    sys.exit(early.run())        # bot/__main__.py and `gatehouse run`

Importing the bot (PTB, pydantic, the engine) takes most of a second; a second instance
is refused before that. The data directory is found the way the settings find it
(GATEHOUSE_DATA_DIR from the environment, then from `.env`, else `data`; a test keeps
the two in step), and the store adopts the lock when it opens (store.backends.datadir.claim).

The program loads with the cyclic garbage collector paused (`loading`, which the
`gatehouse` console script in bot.cli.start uses too): loading makes tens of thousands
of objects that live as long as the process (modules, classes, PTB's types, pydantic's
validators) and no garbage, yet the collector walked them again and again as they were
made: 20 ms of the imports of `gatehouse status` and 73 ms of those of `gatehouse run`
(of 278 and 561 ms, a 2-vCPU VM).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from store import errors
from store.backends import datadir

DATA_DIR_VARIABLE = "GATEHOUSE_DATA_DIR"
DEFAULT_DATA_DIR = Path("data")
ENV_FILE = Path(".env")


def data_dir(env_file: Path = ENV_FILE, override: Path | None = None) -> Path:
    """The data directory the settings will name; variable names match in any case."""
    if override is not None:
        return override
    for key, value in os.environ.items():
        if key.upper() == DATA_DIR_VARIABLE:
            return datadir.parse(value)
    if env_file.is_file():
        import dotenv  # only when there is a file to read

        for key, found in dotenv.dotenv_values(env_file).items():
            if key.upper() == DATA_DIR_VARIABLE and found is not None:
                return datadir.parse(found)
    return DEFAULT_DATA_DIR


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """Import inside this block with the collector paused. Then, if it was running,
    everything alive is frozen (the collector never walks it again) and it resumes."""
    was_running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_running:
            gc.freeze()
            gc.enable()


def run(env_file: Path | None = None, data_dir_override: Path | None = None) -> int:
    """Claim the store, then start the bot: exit 2 at once if another process holds it.

    `env_file` and `data_dir_override` are the command line's --env-file and --data-dir.
    """
    if env_file is not None and not env_file.is_file():
        print(f"gatehouse: --env-file {env_file}: no such file", file=sys.stderr)
        return 2
    try:
        path = data_dir(env_file or ENV_FILE, data_dir_override)
    except errors.DataDirError as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 2
    try:
        datadir.claim(path)
    except (errors.DataDirError, errors.LockHeld) as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"gatehouse: cannot use the data directory {path}: {exc}", file=sys.stderr)
        return 2
    with loading():
        from pipelines.ground import httpclient

        httpclient.prefetch()  # made beside the imports below (see httpclient)
        from bot import app  # the slow part, once the store is ours

    return app.main(env_file=env_file, data_dir=data_dir_override)
