"""`gatehouse audit ...`: verify the chain in place, export it, check an export offline,
and print the public key that checks it.

    gatehouse audit verify [--public-key KEY ...]            the store's chain and its newest
                                  signed checkpoint (exit 1 if broken or not signed by the
                                  data directory's key, a worker's key the deployment key
                                  endorsed, or a KEY given)
    gatehouse audit export [--since DATE] [--format jsonl|csv] [--out FILE]
    gatehouse audit verify --export FILE --public-key KEY    offline: no store, no bot
                                  [--public-key OLD ...]    each key the checkpoints name
    gatehouse audit key                                      the public key (ed25519:<base64>)

The deployment key (pipelines.audit.trust) is derived from GATEHOUSE_TELEGRAM__CALLBACK_SECRET,
else GATEHOUSE_TELEGRAM__TOKEN: what every worker of a deployment already shares.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from bot import settings as settings_mod
from bot.cli import output as cli_output
from pipelines import operations
from pipelines.audit import export as audit_export
from store import units
from store.audit import events
from store.backends import datadir

# pipelines.audit.keys (and cryptography with it) is imported by the actions that use a
# key, so the CLI's other commands start without it.

ACTIONS = ("verify", "export", "key")

Read = Callable[[settings_mod.Settings, Callable[[Any], Any]], Any]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action", choices=ACTIONS, help="verify the chain (or an export), export it, print the key"
    )
    parser.add_argument("--export", type=Path, help="verify: an export file to check offline")
    parser.add_argument(
        "--public-key",
        action="append",
        help="verify: ed25519:<base64>, or a file with it; once per key the checkpoints "
        "name (a store restored under a new key: the old one too). In place, the data "
        "directory's own key and every worker's key the deployment key endorsed are "
        "used as well",
    )
    parser.add_argument("--since", type=since_arg, help="export: events from this UTC date on")
    parser.add_argument(
        "--format",
        choices=audit_export.FORMATS,
        default="jsonl",
        help="export: the file's format (default: %(default)s)",
    )
    parser.add_argument("--out", type=Path, help="export: write here (default: standard output)")


def since_arg(text: str) -> datetime:
    try:
        found = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a date; give 2026-12-01 or 2026-12-01T09:00"
        ) from None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def run(cfg: settings_mod.Settings, args: argparse.Namespace, read: Read) -> int:
    if args.action == "key":
        from pipelines.audit import keys as audit_keys

        if not cfg.data_dir.is_dir():
            raise operations.Invalid(f"no data directory at {cfg.data_dir}: the key is made there")
        key = audit_keys.load_or_create(datadir.prepare(cfg.data_dir))
        cli_output.emit(
            args, {"public_key": audit_keys.public_text(key)}, lambda: audit_keys.public_text(key)
        )
        return 0
    if args.action == "export":
        return _export(cfg, args, read)
    if args.export is not None:
        return _verify_export(args)
    check = _signature_check(cfg, args.public_key or [])
    report = read(cfg, check)
    cli_output.emit(args, report, lambda: cli_output.audit(report))
    return 0 if report.ok else 1


def _signature_check(
    cfg: settings_mod.Settings, given: list[str]
) -> Callable[[Any], Awaitable[events.ChainReport]]:
    """The verify in place: the newest checkpoint's signature is checked with the data
    directory's own key, every worker's key the deployment key endorsed (another leader's)
    and any --public-key given (a key before a restore, or a worker gone since)."""
    from pipelines.audit import keys as audit_keys
    from pipelines.audit import trust

    try:
        publics = [audit_keys.parse_public(_key_text(text)) for text in given]
        local = audit_keys.local_public(cfg.data_dir)
    except ValueError as exc:  # BadKey, or a key file that is not a PEM private key
        raise operations.Invalid(str(exc)) from None
    except OSError as exc:
        raise operations.Invalid(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
    secret = settings_mod.deployment_secret(cfg)
    deployment = trust.deployment_key(secret).public_key() if secret else None

    async def verify(store: Any) -> events.ChainReport:
        keys = publics + ([local] if local else [])
        signature = await trust.signature_check(store, keys, deployment)
        return await operations.audit(store, signature)

    return verify


def _export(cfg: settings_mod.Settings, args: argparse.Namespace, read: Read) -> int:
    try:
        with _output(args.out) as out:
            count = read(cfg, lambda s: audit_export.write(s, out, args.format, args.since))
    except FileExistsError:
        raise operations.Invalid(
            f"{args.out} exists already; give a new file for the export"
        ) from None
    except OSError as exc:
        raise operations.Invalid(f"cannot write {args.out}: {exc.strerror or exc}") from None
    cli_output.progress(f"exported {count} events" + (f" to {args.out}" if args.out else ""))
    return 0


@contextlib.contextmanager
def _output(path: Path | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    with path.open("x", encoding="utf-8", newline="") as out:  # never overwrite a file
        yield out


def _verify_export(args: argparse.Namespace) -> int:
    if not args.public_key:
        raise operations.Invalid("verify --export needs --public-key (from `gatehouse audit key`)")
    from pipelines.audit import keys as audit_keys

    try:
        publics = [audit_keys.parse_public(_key_text(given)) for given in args.public_key]
        # An invalid byte is kept as U+FFFD: the row's hash then names it.
        with args.export.open(encoding="utf-8", errors="replace", newline="") as lines:
            report = audit_export.verify(audit_export.lines_of(lines), publics)
    except audit_keys.BadKey as exc:
        raise operations.Invalid(str(exc)) from None
    except OSError as exc:
        raise operations.Invalid(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
    cli_output.emit(args, report, lambda: verify_text(report))
    return 0 if report.ok else 1


def _key_text(given: str) -> str:
    """The key itself, or the first bytes of the file it names."""
    from pipelines.audit import keys as audit_keys

    if given.strip().startswith((audit_keys.PUBLIC_PREFIX, "-----BEGIN")):
        return given
    with open(given, encoding="utf-8", errors="replace") as file:
        return file.read(audit_keys.MAX_PUBLIC_TEXT)


def verify_text(report: audit_export.Report) -> str:
    if report.problems:
        return "BROKEN: " + "; ".join(report.problems + report.unverified)
    if report.unverified:
        # A missing key is the reader's gap, not the log's: say so, not "broken".
        return "NOT VERIFIED (a signing key is missing): " + "; ".join(report.unverified)
    span = f"events {report.first_id} to {report.last_id}"
    if report.newest is None:
        return f"ok: {span} chain intact; no signed checkpoint, so a cut tail is not ruled out"
    event_id, at = report.newest
    return (
        f"ok: {span} chain intact, {report.checkpoints} signed checkpoints; "
        f"the newest names event {event_id} (signed {units.when(at)}): "
        "compare it with the head posted in the operators' chat"
    )
