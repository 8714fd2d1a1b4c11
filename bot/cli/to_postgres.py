"""`gatehouse migrate-to-postgres`: copy this data directory's SQLite store into the
empty PostgreSQL database that GATEHOUSE_DATABASE_URL names, and verify it there.

    GATEHOUSE_DATABASE_URL=postgresql://... gatehouse migrate-to-postgres

The URL comes from the settings, never the command line (where a password would sit
in the shell's history and the process list). gatehouse must be stopped: what it
wrote after the copy's snapshot would stay behind.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from datetime import datetime

from bot import settings as settings_mod
from bot.cli import output as cli_output
from bot.cli import writes as cli_writes
from store import errors
from store.upkeep import to_postgres


class Refused(errors.Refused):
    """the copy cannot start as things are; the message says what to change"""


def cmd(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    if cfg.database_url is None:
        raise Refused("set GATEHOUSE_DATABASE_URL to the empty PostgreSQL database to copy into")
    pid = cli_writes.writer_pid(cfg)
    if pid is not None:
        raise Refused(f"gatehouse runs as pid {pid} on this store; stop it first")
    source = dataclasses.replace(settings_mod.store_config(cfg), database_url=None)
    url = cfg.database_url.get_secret_value()
    report = asyncio.run(to_postgres.copy(source, url, cli_output.progress))
    cli_output.emit(args, report, lambda: text(report))
    return 0


def text(report: to_postgres.Report) -> str:
    rows = sum(report.rows.values())
    return "\n".join(
        [
            f"copied {rows} rows in {len(report.rows)} tables to {report.location}"
            f" (schema version {report.schema_version})",
            f"audit chain verified on arrival: {report.events_checked} events",
            "next: keep GATEHOUSE_DATABASE_URL set and start the workers",
        ]
    )
