"""Every argument of every CLI command says what it is, and an option whose value applies
when it is not given says that value."""

from __future__ import annotations

import argparse
from pathlib import Path

from bot.cli import main as cli


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser, _ = cli._parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"gatehouse": parser, **sub.choices}


def test_every_argument_has_help_and_every_valued_option_its_default() -> None:
    missing, no_default = [], []
    for name, parser in _commands().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(where)
            # An option with a value that applies when it is not given must say that value.
            has_default = action.default not in (None, argparse.SUPPRESS)
            takes_value = action.option_strings and action.nargs != 0 and has_default
            if takes_value and "default" not in (action.help or ""):
                no_default.append(where)
    assert missing == []
    assert no_default == []


def test_the_defaults_shown_are_the_defaults_used() -> None:
    commands = _commands()

    def shown(name: str) -> str:
        return " ".join(commands[name].format_help().split())

    assert "(default: 8780)" in shown("demo")
    assert "(default: 90)" in shown("sweep")
    assert "(default: 5)" in shown("dry-run")
    args = commands["gatehouse"].parse_args(["sweep"])
    assert args.days == 90


def test_help_names_the_docs_and_every_doc_it_names_exists() -> None:
    parser, _ = cli._parser()
    shown = " ".join(parser.format_help().split())
    names = [
        "pipelines.md",
        "operations.md",
        "troubleshooting.md",
        "architecture.md",
        "benchmarks.md",
    ]
    assert "docs/" in shown and all(name in shown for name in names)
    docs = Path(__file__).resolve().parents[2] / "docs"
    assert sorted(p.name for p in docs.glob("*.md")) == sorted(names)
    readme = (docs.parent / "README.md").read_text()
    assert all(f"docs/{name}" in readme for name in names)  # the README links each one
