"""`gatehouse approve|reject|edit|redraft|remove-image ITEM`: an operator's decision from
a terminal, for when Telegram is unreachable.

Through the running bot's control socket (or, with no bot running, holding the writer
lock), by the same functions the Telegram buttons call. The events name the Unix user
("cli:<user>"); the decision applies to the version given with --version (default: the
item's current one), as a card's buttons apply to the card's version.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable
from datetime import datetime
from typing import Any

from bot import settings as settings_mod
from bot.chat import wording
from bot.cli import output as cli_output
from bot.cli import reads as cli_reads
from bot.cli import writes as cli_writes
from bot.process import control
from pipelines import operations
from pipelines.operations import review
from store import db
from store.audit import events

#: What each command does, as `gatehouse --help` lists it.
HELP = {
    "approve": "approve an item's draft (as a card's Approve does)",
    "reject": "reject an item's draft, with --reason",
    "edit": "replace an item's draft with --text (or - for stdin): a new version",
    "redraft": "draft a rejected or expired item again with --note for the model",
    "remove-image": "take the image off an item's draft (as a card's Remove image does)",
}
#: The longest text read from stdin for --text - (bytes); a draft is far shorter.
MAX_STDIN = 256 * 1024


def add_arguments(parser: argparse.ArgumentParser, action: str, item_type: Any) -> None:
    parser.add_argument(
        "item", type=item_type, help="the item id, as /pending and the cards show it"
    )
    parser.add_argument(
        "--version", type=item_type, help="the draft version you read (default: current)"
    )
    if action == "reject":
        parser.add_argument(
            "--reason", default="", help="why, as the card and /replay show it (default: none)"
        )
    elif action == "edit":
        parser.add_argument("--text", required=True, help="the new text, or - to read stdin")
    elif action == "redraft":
        parser.add_argument("--note", required=True, help="what the next draft should change")


def cmd_decide(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    action = args.command
    text = _text(args)
    request = {"item": args.item, "version": args.version, "text": text}
    actor = events.cli(control.unix_user(os.geteuid()))
    known = cli_reads.pipelines(cfg)

    def local(store: db.Store) -> Awaitable[review.Decided]:
        typed = review.Typed(action, args.item, actor, args.version, text)
        return control.decide_in_words(store, known, typed, now)

    data = operations.plain(cli_writes.write(cfg, action, request, local))
    item = data["item"]
    summary = (
        f"item {item['id']}: {data['said']} "
        f"(now {wording.state(item['state'])}, "
        f"version {item['version']} of attempt {item['attempt']})"
    )
    cli_output.emit(args, data, lambda: summary)
    return 0


def _text(args: argparse.Namespace) -> str:
    if args.command in ("approve", "remove-image"):
        return ""
    if args.command == "reject":
        return str(args.reason)
    if args.command == "redraft":
        return str(args.note)
    if args.text != "-":
        return str(args.text)
    data = sys.stdin.buffer.read(MAX_STDIN + 1)
    if len(data) > MAX_STDIN:
        raise operations.Invalid(f"the text on stdin is longer than {MAX_STDIN} bytes")
    return data.decode("utf-8", errors="replace")
