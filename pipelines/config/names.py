"""The pipeline names the files in a directory declare, read without validating the rest.

    names = config_names.declared(cfg.pipelines_dir)     # ["digest", "news"]
    names = config_names.declared(cfg.pipelines_dir, cfg.data_dir / config_names.CACHE_NAME)

What `gatehouse status` and `gatehouse runs` list when no bot is running: the `name:`
of each file `pipelines.config.spec.load_dir` would read, without the models, JSON schemas
and cron parsing that loading a pipeline costs (most of a cold CLI start). A file that
would fail to load for another reason is still listed; `gatehouse check` says why.

With a cache file, each file's name is kept beside its inode, size, mtime and ctime,
and a file whose four are unchanged is not parsed again: a cold `gatehouse status`
then never imports PyYAML (about a tenth of its start). The cache is advisory: one
that cannot be read or written is ignored, and any change to a file reads it again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

#: A pipeline's name: what its runs, items and budget scope are filed under.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SUFFIXES = frozenset({".yaml", ".yml"})
#: The named schedules' file in the pipelines directory (pipelines.config.schedules): it sits
#: beside the pipeline files but is not one.
SCHEDULES_FILE = "schedules.yaml"
#: The cache's file name in the data directory.
CACHE_NAME = "pipeline-names.json"
#: A cache larger than this is not read (bytes): one entry is about 100 bytes.
CACHE_MAX_BYTES = 1024 * 1024

#: What a file's entry holds: its stamp (inode, size, mtime_ns, ctime_ns) and its name.
Entry = tuple[list[int], str | None]


def files(directory: Path) -> list[Path]:
    """The pipeline files in `directory`, in the order they are loaded (not recursive)."""
    return sorted(
        p
        for p in directory.iterdir()
        if p.suffix in SUFFIXES and p.name != SCHEDULES_FILE and p.is_file()
    )


def declared(directory: Path, cache: Path | None = None) -> list[str]:
    """The valid names the files declare, each once, sorted; [] without a directory.

    With `cache`, names of unchanged files come from it, and it is rewritten when
    anything changed."""
    if not directory.is_dir():
        return []
    known = _read(cache) if cache is not None else {}
    seen: dict[str, Entry] = {}
    for file in files(directory):
        try:
            info = file.stat()  # before reading: a change made meanwhile stamps it anew
        except OSError:
            continue
        stamp = [info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
        key = str(file.absolute())
        cached = known.get(key)
        seen[key] = cached if cached and cached[0] == stamp else (stamp, name_in(file))
    if cache is not None and seen != known:
        _write(cache, seen)
    return sorted({name for _, name in seen.values() if name})


def name_in(file: Path) -> str | None:
    """The valid name one file declares; None if it declares none or cannot be read."""
    from pipelines.config import yaml_file

    try:
        _, data = yaml_file.parse_yaml(yaml_file.read(file))
    except yaml_file.Problem:
        return None
    name = data.get("name")
    return name if isinstance(name, str) and NAME_RE.fullmatch(name) else None


def _read(cache: Path) -> dict[str, Entry]:
    try:
        with cache.open("rb") as stream:
            raw = stream.read(CACHE_MAX_BYTES + 1)
        entries = json.loads(raw) if len(raw) <= CACHE_MAX_BYTES else {}
    except (OSError, ValueError):
        return {}
    if not isinstance(entries, dict):
        return {}
    found: dict[str, Entry] = {}
    for key, entry in entries.items():
        match entry:
            case [[int(), int(), int(), int()] as stamp, str() | None as name] if (
                name is None or NAME_RE.fullmatch(name)
            ):
                found[key] = (stamp, name)
    return found


def _write(cache: Path, entries: dict[str, Entry]) -> None:
    """Replace the cache at once (a reader sees the old one or the new one), 0600."""
    temporary = cache.with_name(f".{cache.name}.{os.getpid()}")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as stream:
            json.dump({key: [stamp, name] for key, (stamp, name) in entries.items()}, stream)
        os.replace(temporary, cache)
    except OSError:  # a cache not written costs a parse next time
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
