"""The `gatehouse` command line.

    gatehouse status          # open the store (migrating it) and print its state
    gatehouse run             # start the operator bot and the engine

Exit codes: 0 ok, 1 a check failed, 2 bad settings or an unusable data directory.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from bot import settings as settings_mod
from store import datadir, db, errors, info, startup


def _store_config(cfg: settings_mod.Settings) -> db.StoreConfig:
    return db.StoreConfig(
        data_dir=cfg.data_dir,
        synchronous=cfg.store.synchronous,
        wal_truncate_bytes=cfg.store.wal_truncate_mb * 1024 * 1024,
    )


async def _status(cfg: settings_mod.Settings) -> int:
    config = _store_config(cfg)
    holder = datadir.is_locked(config.data_dir) if config.data_dir.exists() else None
    store = await db.Store.open(config, readonly=holder is not None)
    try:
        if not store.readonly:
            await startup.recover(store, datetime.now(UTC))
        summary = await info.info(store)
    finally:
        await store.close()
    print(f"store       {summary.path}")
    print(f"schema      version {summary.schema_version}")
    print(f"wal         {summary.wal_bytes} bytes")
    print(f"writer      {'running as pid ' + str(holder) if holder else 'not running'}")
    for table, count in summary.rows.items():
        print(f"  {table:<20} {count:>10} rows")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gatehouse", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="open the store and print its state")
    sub.add_parser("run", help="start the operator bot and the engine (same as python -m bot)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = settings_mod.load()
    except settings_mod.SettingsInvalid as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 2
    if args.command == "run":
        from bot import app  # PTB loads only for the command that needs it

        return app.main(cfg)
    try:
        if args.command == "status":
            return asyncio.run(_status(cfg))
    except (
        errors.DataDirError,
        errors.LockHeld,
        errors.PragmaMismatch,
        errors.MigrationError,
    ) as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
