"""The pipeline names the files in a directory declare, read without validating the rest.

    names = config_names.declared(cfg.pipelines_dir)     # ["digest", "news"]

What `gatehouse status` and `gatehouse runs` list when no bot is running: the `name:`
of each file `pipelines.config.load_dir` would read, without the models, JSON schemas
and cron parsing that loading a pipeline costs (most of a cold CLI start). A file that
would fail to load for another reason is still listed; `gatehouse check` says why.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipelines import config_errors

#: A pipeline's name: what its runs, items and budget scope are filed under.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SUFFIXES = frozenset({".yaml", ".yml"})


def files(directory: Path) -> list[Path]:
    """The pipeline files in `directory`, in the order they are loaded (not recursive)."""
    return sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and p.is_file())


def declared(directory: Path) -> list[str]:
    """The valid names the files declare, each once, sorted; [] without a directory."""
    if not directory.is_dir():
        return []
    found: set[str] = set()
    for file in files(directory):
        try:
            _, data = config_errors.parse_yaml(config_errors.read(file))
        except config_errors.Problem:
            continue
        name = data.get("name")
        if isinstance(name, str) and NAME_RE.fullmatch(name):
            found.add(name)
    return sorted(found)
