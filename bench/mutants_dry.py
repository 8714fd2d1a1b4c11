"""`python -m bench mutants --smoke`: everything a mutation run needs, checked without
running a mutant (a real run takes minutes; CI runs this one).

It names what has drifted: a group's module or test file that is gone, a hand-written
SQL mutation whose text is not once in its query file, a scratch project that cannot be
made or configured, or a mutmut that does not start.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from bench import mutants


def check(work: Path) -> dict[str, object]:
    """The groups and SQL mutations as they would run, checked in a scratch copy in
    `work`; raises SystemExit naming the first thing that would break a real run."""
    for name, group in mutants.GROUPS.items():
        missing = [f for f in (*group.modules, *group.tests) if not (mutants.ROOT / f).is_file()]
        if missing:
            raise SystemExit(f"mutants group {name}: no such file {', '.join(missing)}")
        project = mutants._scratch(work / name)
        mutants._configure(project, group)
        print(f"{name}: {len(group.modules)} modules, {len(group.tests)} test files", flush=True)
    sql = 0
    for step in mutants.SQL:
        text = (mutants.ROOT / step.file).read_text()
        for name, (old, _new) in step.mutants.items():
            if text.count(old) != 1:
                raise SystemExit(f"{name}: {old!r} is not once in {step.file}; update SQL")
            sql += 1
    print(f"sql: {sql} mutations apply", flush=True)
    # mutmut reads its config (or guesses the code's folder from the working directory's
    # name) even for --version: ask it where a config names the code, as a real run does.
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["store"]\n')
        (Path(scratch) / "store").mkdir()
        version = subprocess.run(
            [str(mutants.MUTMUT), "--version"], capture_output=True, text=True, cwd=scratch
        )
    if version.returncode != 0:
        raise SystemExit(f"{mutants.MUTMUT} --version failed: {version.stderr.strip()}")
    return {
        "bench": "mutants",
        "smoke": True,
        "groups": len(mutants.GROUPS),
        "sql_mutations": sql,
        "mutmut": version.stdout.strip(),
    }
