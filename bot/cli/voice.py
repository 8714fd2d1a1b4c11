"""`gatehouse voice FILE|- [--pipeline NAME | --profile FILE]`: the tells of a text, found
with the rules a pipeline's drafts get (pipelines.voice), so a voice file can be tried on
old posts before it goes live. Exit 1 when a tell is a block, 0 otherwise, 2 on bad input.

    $ gatehouse voice post.txt --pipeline news
    warn   1:12   delve       "delve"   Say what was looked at: ...
    ✍️ 1 tell: delve
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bot import settings as settings_mod
from bot.cli import output as cli_output
from bot.cli import reads as cli_reads

if TYPE_CHECKING:
    from pipelines.voice import lint

#: The most text read (bytes): a post is a few KB; a book is not a draft.
MAX_TEXT_BYTES = 1024 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the text to lint, or - to read standard input")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--pipeline",
        metavar="NAME",
        help="the rules of this pipeline's voice (default: the built-in rules)",
    )
    which.add_argument(
        "--profile", type=Path, metavar="FILE", help="the rules of this voice file (YAML)"
    )


def cmd(cfg: settings_mod.Settings, args: argparse.Namespace, now: datetime) -> int:
    from pipelines.voice import lint

    text = _read(args.file)
    rules = _rules(cfg, args)
    tells = lint.lint(text, rules)
    value = {
        "blocked": tells.blocked,
        "summary": lint.summary(tells),
        "tells": [
            {"rule": hit.rule, "severity": hit.severity, "start": hit.start, "end": hit.end,
             "text": hit.text, "hint": hit.hint, "figure": hit.figure}
            for hit in tells.hits
        ],
    }  # fmt: skip
    cli_output.emit(args, value, lambda: _shown(text, tells, rules))
    return 1 if tells.blocked else 0


def _read(name: str) -> str:
    """The text of `name` (or of standard input for -); ValueError, exit 2, when unusable."""
    try:
        if name == "-":
            raw = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1)
        else:
            with Path(name).open("rb") as stream:
                raw = stream.read(MAX_TEXT_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {name}: {exc.strerror or exc}") from None
    if len(raw) > MAX_TEXT_BYTES:
        raise ValueError(f"{name} is larger than {MAX_TEXT_BYTES} bytes: lint one post at a time")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read {name}: not UTF-8 ({exc.reason})") from None


def _rules(cfg: settings_mod.Settings, args: argparse.Namespace) -> lint.Rules:
    from pipelines import operations
    from pipelines.config import voice
    from pipelines.voice import lint

    if args.profile is not None:
        parsed, errors = voice.load(args.profile)
        if parsed is None:
            raise ValueError("the voice file has errors:\n" + "\n".join(f"  {e}" for e in errors))
        return lint.Rules(parsed.compiled())
    if args.pipeline is None:
        return lint.default_rules()
    loaded = cli_reads.loaded(cfg)
    name = operations.check_pipeline(args.pipeline, loaded.pipelines, loaded.broken)
    return voice.rules_of(loaded.pipelines[name].voice)


def _shown(text: str, tells: lint.Tells, rules: lint.Rules) -> str:
    from pipelines.voice import lint
    from pipelines.voice import rules as voice_rules

    if not tells:
        return "no tells"
    lines = []
    for hit in tells.hits:
        metric = rules.by_name[hit.rule].metric
        figure = f" ({hit.figure:g} {voice_rules.UNITS[metric]})" if metric else ""
        line = text.count("\n", 0, hit.start) + 1
        column = hit.start - (text.rfind("\n", 0, hit.start) + 1) + 1
        where = f"{line}:{column}"
        lines.append(
            f"{hit.severity:<6} {where:<7} {hit.rule:<18} {hit.text!r}  {hit.hint}{figure}"
        )
    return "\n".join([*lines, lint.summary(tells)])
