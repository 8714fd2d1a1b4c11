"""`gatehouse token create|list|revoke`: bearer tokens for the HTTP trigger.

    gatehouse token create ci     # prints the token once; the store keeps only its hash
    gatehouse token list
    gatehouse token revoke ci     # its next request is refused (401)

The token is made here, in the CLI, and only its hash travels to the store (through the
running bot's control socket, or directly when no bot runs), so it never reaches a log,
the database or the bot's memory.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import datetime

from bot import settings as settings_mod
from bot.cli import output as cli_output
from bot.cli import reads as cli_reads
from bot.cli import writes as cli_writes
from bot.process import control
from pipelines import operations
from store import db
from store.intake import tokens

ACTIONS = ("create", "list", "revoke")


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    token = add("token", cmd_token, "create, list or revoke HTTP trigger tokens")
    token.add_argument("action", choices=ACTIONS, help="what to do")
    token.add_argument("name", nargs="?", help="the caller's name (create and revoke)")


def cmd_token(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    if args.action == "list":
        return _list(cfg, args)
    if not args.name:
        raise operations.Invalid(
            f"gatehouse token {args.action} <name>: the caller's name is missing"
        )
    name = tokens.check_name(args.name)
    if args.action == "create":
        return _create(cfg, args, name, now)
    result = cli_writes.write(
        cfg, "token-revoke", {"name": name}, lambda s: tokens.revoke(s, name, control.ACTOR, now)
    )
    data = operations.plain(result)
    cli_output.emit(args, data, lambda: f"token {data['name']} revoked")
    return 0


def _create(cfg: settings_mod.Settings, args: argparse.Namespace, name: str, now: datetime) -> int:
    secret = tokens.new_token()
    digest = tokens.digest(secret)
    result = cli_writes.write(
        cfg,
        "token-create",
        {"name": name, "hash": digest},
        lambda s: tokens.create(s, name, digest, control.ACTOR, now),
    )
    data = {**operations.plain(result), "token": secret}
    cli_output.emit(
        args,
        data,
        lambda: (
            f"token {name} created; it is shown only now:\n{secret}\n"
            f"send it as: Authorization: Bearer <token>"
        ),
    )
    return 0


def _list(cfg: settings_mod.Settings, args: argparse.Namespace) -> int:
    async def fn(store: db.Store) -> list[tokens.Token]:
        return await tokens.all_tokens(store)

    found = cli_reads.read(cfg, fn)
    cli_output.emit(args, found, lambda: _table(found))
    return 0


def _table(found: list[tokens.Token]) -> str:
    if not found:
        return "no tokens; create one with: gatehouse token create <name>"
    lines = [f"{'name':<20} {'created':<17} state"]
    for token in found:
        state = f"revoked {_when(token.revoked_at)}" if token.revoked_at else "live"
        lines.append(f"{token.name:<20} {_when(token.created_at):<17} {state}")
    return "\n".join(lines)


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at else ""
