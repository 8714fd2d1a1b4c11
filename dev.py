"""Set up and run gatehouse from a fresh clone with nothing but Python 3.11+.

    python3 dev.py demo     # the offline demo (no Telegram token, no API key)
    python3 dev.py test     # the test suite
    python3 dev.py test --fast   # all but the slow end-to-end tests (pytest -m "not slow")
    python3 dev.py lint     # ruff and mypy
    python3 dev.py coverage # the test suite under coverage: line and branch, per package
    python3 dev.py bench --smoke   # every bench at its small size: each must end in its JSON line
    python3 dev.py schema   # write docs/schema/*.sql from the migrations
    python3 dev.py schema --check   # fail when either schema file is not what the migrations make
    python3 dev.py setup    # only create .venv and install the locked dependencies
    python3 dev.py setup --production   # the same, without the test and lint tools (servers)

Each command first makes sure `.venv` holds exactly what `requirements-dev.lock`
pins (installed with uv, which is itself installed into the venv), so the two
README commands work on a machine that has only Python and git.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
LOCK = ROOT / "requirements-dev.lock"
RUNTIME_LOCK = ROOT / "requirements.lock"
STAMP = VENV / ".gatehouse-lock"
UV_VERSION = "0.13.9"  # pinned so every machine resolves the lock the same way


def _run(*cmd: str | Path) -> None:
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT)


def setup(lock: Path = LOCK) -> None:
    """Create .venv and sync it to the lock file; quick when nothing changed."""
    if sys.version_info < (3, 11):
        sys.exit(f"gatehouse needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not PY.exists():
        print("creating .venv ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = lock.read_text() + (ROOT / "pyproject.toml").read_text()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    print("installing locked dependencies ...", flush=True)
    _run(PY, "-m", "pip", "install", "--quiet", f"uv=={UV_VERSION}")
    env_python = f"--python={PY}"
    # Bytecode at install time, as pip does: without it every start compiles the
    # libraries again (about half of `gatehouse status` when PYTHONDONTWRITEBYTECODE is set).
    _run(BIN / "uv", "pip", "sync", "--quiet", "--compile-bytecode", env_python, lock)
    _run(BIN / "uv", "pip", "install", "--quiet", "--no-deps", env_python, "-e", ".")
    STAMP.write_text(wanted)


#: Line-and-branch coverage each package must reach (percent); the demo is left out.
COVERAGE_TARGETS = {"store": 95.0, "pipelines": 90.0, "bot": 90.0}


def _coverage(rest: list[str]) -> int:
    """Run the tests under coverage (subprocesses included), then report each package."""
    env = {**os.environ, "COVERAGE_FILE": str(VENV / "coverage" / "data")}
    (VENV / "coverage").mkdir(exist_ok=True)
    coverage = [str(PY), "-m", "coverage"]
    subprocess.call([*coverage, "erase"], cwd=ROOT, env=env)
    tests = subprocess.call([*coverage, "run", "-m", "pytest", *rest], cwd=ROOT, env=env)
    subprocess.call([*coverage, "combine", "--quiet"], cwd=ROOT, env=env)
    subprocess.call([*coverage, "report", "--skip-covered", "--sort=cover"], cwd=ROOT, env=env)
    short = False
    for package, target in COVERAGE_TARGETS.items():
        total = subprocess.run(
            [*coverage, "report", f"--include={package}/*", "--format=total", "--precision=1"],
            cwd=ROOT, env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        below = float(total) < target
        short = short or below
        print(f"{package + '/':<11} {total:>5}%  (target {target:g}%){'  BELOW' if below else ''}")
    return tests or (1 if short else 0)


def _benches() -> list[str]:
    """The benches `python -m bench` knows (its table imports nothing but the stdlib)."""
    return list(importlib.import_module("bench.__main__").BENCHES)


def _bench(rest: list[str]) -> int:
    """Run every bench with `rest` (CI: --smoke), one after another; each must exit 0
    and print one JSON object as its last line. A failed one is shown whole."""
    failed = []
    for name in _benches():
        started = time.monotonic()
        done = subprocess.run(
            [str(PY), "-m", "bench", name, *rest], cwd=ROOT, capture_output=True, text=True
        )
        seconds = time.monotonic() - started
        lines = done.stdout.strip().splitlines()
        try:
            ok = done.returncode == 0 and isinstance(json.loads(lines[-1]), dict)
        except (IndexError, ValueError):
            ok = False
        print(f"bench {name:<12} {seconds:6.1f} s  {'ok' if ok else 'FAILED'}", flush=True)
        if not ok:
            failed.append(name)
            print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
    if failed:
        print(f"benches failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _demo(rest: list[str]) -> int:
    # Its own session: a terminal's Ctrl-C reaches this process alone, which passes
    # it on once; SIGINT or SIGTERM sent to this pid stop the demo the same way.
    demo = subprocess.Popen(
        [str(BIN / "gatehouse"), "demo", *rest], cwd=ROOT, start_new_session=True
    )

    def forward(signum: int, _frame: object) -> None:
        # The demo stops cleanly on SIGINT and SIGTERM; a closed terminal asks the same.
        demo.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    return demo.wait()


def main(argv: list[str]) -> int:
    command, rest = (argv[0], argv[1:]) if argv else ("help", [])
    if command in {"help", "-h", "--help"}:
        print(__doc__)
        return 0
    if command == "setup" and rest == ["--production"]:
        setup(RUNTIME_LOCK)
        return 0
    setup()
    if command == "setup":
        return 0
    if command == "test":
        if rest[:1] == ["--fast"]:  # leave out the slow end-to-end tests (marker "slow")
            rest = ["-m", "not slow and not crash", *rest[1:]]
        return subprocess.call([str(PY), "-m", "pytest", *rest], cwd=ROOT)
    if command == "lint":
        ruff = subprocess.call([str(BIN / "ruff"), "check", "."], cwd=ROOT)
        fmt = subprocess.call([str(BIN / "ruff"), "format", "--check", "."], cwd=ROOT)
        mypy = subprocess.call([str(BIN / "mypy")], cwd=ROOT)
        return 1 if (ruff or fmt or mypy) else 0
    if command == "demo":
        return _demo(rest)
    if command == "coverage":
        return _coverage(rest)
    if command == "bench":
        return _bench(rest)
    if command == "schema":  # PostgreSQL's needs the local server (see store/backends/generate.py)
        return subprocess.call([str(PY), "-m", "store.backends.generate", *rest], cwd=ROOT)
    valid = "demo, test, lint, coverage, bench, schema, setup"
    print(f"unknown command {command!r}; valid: {valid}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
