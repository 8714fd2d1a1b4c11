"""Mutation testing of the invariant modules: does each one-line break fail a test?

    python -m bench mutants                      # the default groups (DEFAULT), then the SQL step
    python -m bench mutants --only chain ledger  # some groups
    python -m bench mutants --show               # also print the diff of each survivor
    python -m bench mutants --work /tmp/mutants  # keep the copies: a second run is incremental
    python -m bench mutants --smoke              # check the groups and SQL mutations, run none

The tool is mutmut 3, chosen over cosmic-ray 8.7 after running both here on
bot/ground/callbacks.py (Python 3.11, three top-level packages, pytest-asyncio). mutmut
copies the sources into a `mutants/` folder, switches mutants at run time, forks each
one from a process that has already imported everything, and runs only the tests that
executed the mutated function: 82 mutants in 12 s. cosmic-ray starts a new pytest per
mutant: 9 of its 50 in 90 s on the same (loaded) machine; and it rewrites the module in
place, so a run stopped by a timeout left a mutant behind in the source file.
Neither mutates SQL, so the SQL step below applies short lists of hand-written
mutations to the queries that carry an invariant in their WHERE clause (the ledger's
settle, the leader's lease) and runs their tests against each.

Each group runs in its own scratch copy of the project (never in the working tree),
restricted to the test files named with it. Survivors that cannot be killed because
they change nothing observable are listed with the reason in
bench/mutants_equivalent.txt; the summary counts them apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import mutants_dry

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = Path(__file__).with_name("mutants_equivalent.txt")
MUTMUT = Path(sys.executable).with_name("mutmut")
#: What a scratch copy needs: the code, its tests, and the schema files tests read.
COPIED = ("bot", "store", "pipelines", "tests", "docs/schema")


@dataclass(frozen=True)
class Group:
    modules: tuple[str, ...]
    #: The only test files run against these mutants: the ones written for these invariants.
    tests: tuple[str, ...]


GROUPS = {
    "bot": Group(("bot/ground/callbacks.py", "bot/chat/auth.py"), ("tests/bot/test_bot_units.py",)),
    "chain": Group(
        ("store/audit/events.py",),
        (
            "tests/store/test_invariants.py",
            "tests/store/test_machine.py",
            "tests/store/test_races.py",  # PostgreSQL's writers sharing the chain
            "tests/store/test_verify.py",  # what verify says for each forgery
        ),
    ),
    "items": Group(
        (
            "store/items/moves.py",
            "store/items/rows.py",
            "store/review/decisions.py",
            "store/drafts.py",
        ),
        (
            "tests/store/test_invariants.py",
            "tests/store/test_item_contracts.py",
            "tests/store/test_machine.py",
            "tests/store/test_store_reads.py",  # approved_since: the duplicate gate's window
            "tests/pipelines/test_review.py",  # undo: its window, its voters, its event
        ),
    ),
    "ledger": Group(
        ("store/ledger/settle.py",),
        (
            "tests/store/test_invariants.py",
            "tests/store/test_ledger_settle.py",
            "tests/store/test_ledger.py",
            "tests/store/test_ledger_statements.py",
        ),
    ),
    "budget": Group(
        ("store/ledger/budgets.py", "store/ledger/claims.py"),
        (
            "tests/store/test_invariants.py",
            "tests/store/test_ledger.py",
            "tests/store/test_ledger_charge.py",
            "tests/store/test_ledger_stateful.py",
            "tests/store/test_ledger_settle.py",
            "tests/store/test_ledger_trail.py",
            "tests/store/test_ledger_statements.py",
            "tests/store/test_work_claims.py",
            "tests/store/test_races.py",
            "tests/pipelines/test_llm_drafter.py",  # a claim's lease renewed through a call
            "tests/pipelines/test_resume_units.py",
        ),
    ),
    "outbox": Group(
        ("store/outbox.py", "store/intake/seen.py"),
        (
            "tests/store/test_invariants.py",
            "tests/store/test_outbox_across_workers.py",
            "tests/store/test_outbox_rows.py",
            "tests/store/test_outbox_wakeup.py",
            "tests/store/test_retention.py",
            "tests/store/test_seen_and_runs.py",
            "tests/store/test_races.py",
            "tests/store/test_work_claims.py",
            "tests/store/test_store_reads.py",
            "tests/store/test_payloads.py",
            # The outbox's own callers: the sender, the dispatcher, the review's undo.
            "tests/bot/test_bot_sender.py",
            "tests/pipelines/test_dispatcher.py",
            "tests/pipelines/test_review.py",
            "tests/pipelines/test_resend_cards.py",
        ),
    ),
    # Not in DEFAULT yet: most of its survivors are equivalent mutants still to be listed
    # as such (SQL keywords in lower case, the task's name, grouping: MAX_BATCH's bound,
    # the early-commit flag), and a mutant that deadlocks costs the whole test timeout,
    # so a run takes far longer than the other groups'.
    "writer": Group(
        ("store/backends/writer.py", "store/backends/lanes.py"),
        (
            "tests/store/test_writer_outcomes.py",
            "tests/store/test_lanes.py",
            "tests/e2e/test_storage_faults.py",
            "tests/store/test_savepoints.py",
            "tests/store/test_store_core.py",
            "tests/store/test_wal.py",
        ),
    ),
    "machine": Group(
        ("store/items/machine.py", "store/cluster/leases.py"),
        (
            "tests/store/test_invariants.py",
            "tests/store/test_machine.py",
            "tests/store/test_machine_stateful.py",
            "tests/store/test_migrations.py",
            "tests/store/test_leases.py",
            "tests/store/test_races.py",
            "tests/pipelines/test_leader.py",
        ),
    ),
}

#: The groups a bare `python -m bench mutants` runs: every survivor of theirs is explained.
DEFAULT = ("bot", "chain", "items", "ledger", "budget", "outbox", "machine", "sql")


@dataclass(frozen=True)
class SqlMutants:
    """Hand-written breaks of one query file's guards and assignments (mutmut leaves SQL
    alone), each run against the tests named with it."""

    file: str
    tests: tuple[str, ...]
    #: Mutant name -> (text in the file, what replaces it).
    mutants: dict[str, tuple[str, str]]


SQL = (
    SqlMutants(
        "store/sql/ledger_settle.sql",
        (
            "tests/store/test_invariants.py",
            "tests/store/test_ledger_settle.py",
            "tests/store/test_ledger.py",
        ),
        {
            "sql.settle.no_state_guard": (" AND state = :from_state", ""),
            "sql.settle.no_id_guard": ("WHERE id = :id AND ", "WHERE "),
            "sql.settle.state_not_settled": ("SET state = 'settled'", "SET state = 'started'"),
            "sql.settle.no_actual": ("actual_micros = :actual_micros", "actual_micros = NULL"),
            "sql.settle.no_evidence": ("evidence = :evidence", "evidence = NULL"),
            "sql.settle.no_usage": ("usage = :usage", "usage = NULL"),
            "sql.settle.reason_kept": ("coalesce(:reason, reason)", "reason"),
            "sql.settle.no_ended_at": ("ended_at = :now", "ended_at = NULL"),
        },
    ),
    # PostgreSQL's one-statement claim steps: each guard the statement-by-statement way
    # checks in Python is a clause here.
    SqlMutants(
        "store/sql/postgres/claims.sql",
        (
            "tests/store/test_ledger_statements.py",
            "tests/store/test_ledger.py",
            "tests/store/test_budget_slots.py",
            "tests/store/test_races.py",
        ),
        {
            "sql.pg_begin.no_room": (
                "+ CAST(:micros AS bigint) <= s.granted_micros\n       FOR",
                "+ CAST(:micros AS bigint) <= s.granted_micros + 1000000000\n       FOR",
            ),
            "sql.pg_begin.some_held": ("WHERE (SELECT count(*) FROM room) = w.n", "WHERE true"),
            "sql.pg_start.not_reserved": (" AND state = 'reserved'\n", "\n"),
            "sql.pg_start.at_lease_end": (
                "lease_until > CAST(:now AS bigint)",
                "lease_until >= CAST(:now AS bigint)",
            ),
        },
    ),
    SqlMutants(
        "store/sql/postgres/ledger_settle.sql",
        (
            "tests/store/test_ledger_statements.py",
            "tests/store/test_ledger_settle.py",
            "tests/store/test_ledger.py",
            "tests/store/test_invariants.py",
        ),
        {
            "sql.pg_complete.not_started": (" AND c.state = 'started'", ""),
            "sql.pg_complete.passed_hash": (
                "c.item_hash = CAST(:item_hash AS text)\n                AND ",
                "",
            ),
            "sql.pg_complete.stored_hash": (
                "AND c.item_hash = (SELECT i.content_hash",
                "AND c.item_hash <> (SELECT i.content_hash",
            ),
            "sql.pg_complete.no_overrun_grant": (
                "greatest(0, s.actual_micros - h.micros)",
                "0",
            ),
            "sql.pg_complete.own_spend_unseen": (
                "+ s.actual_micros AS spent_micros",
                "AS spent_micros",
            ),
        },
    ),
    # The leader's lease: two workers must never both believe they lead.
    SqlMutants(
        "store/sql/leases.sql",
        ("tests/store/test_leases.py", "tests/pipelines/test_leader.py"),
        {
            "sql.leases.renew_any_holder": (
                "name = :name AND holder = :holder AND term = :term AND expires_at >= :now",
                "name = :name AND term = :term AND expires_at >= :now",
            ),
            "sql.leases.renew_any_term": (
                "holder = :holder AND term = :term AND expires_at >= :now",
                "holder = :holder AND expires_at >= :now",
            ),
            "sql.leases.renew_after_lapse": (" AND expires_at >= :now\nRETURNING", "\nRETURNING"),
            "sql.leases.renew_not_at_expiry": ("expires_at >= :now", "expires_at > :now"),
            "sql.leases.renew_keeps_expiry": (
                "SET expires_at = :until",
                "SET expires_at = expires_at",
            ),
            "sql.leases.elect_over_holder": (
                "ON CONFLICT (name) DO NOTHING",
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder",
            ),
            "sql.leases.take_over_live": ("(expires_at < :now OR :steal = 1)", "(1 = 1)"),
            "sql.leases.take_over_at_expiry": ("expires_at < :now OR", "expires_at <= :now OR"),
            "sql.leases.take_over_no_steal": (" OR :steal = 1)", ")"),
            "sql.leases.take_over_same_term": ("term = term + 1", "term = term"),
            "sql.leases.take_over_keeps_acquired": (
                "acquired_at = :now, expires_at = :until",
                "expires_at = :until",
            ),
            "sql.leases.release_any_holder": (
                "WHERE name = :name AND holder = :holder AND term = :term\n",
                "WHERE name = :name AND term = :term\n",
            ),
            "sql.leases.release_any_term": (
                "AND holder = :holder AND term = :term\n",
                "AND holder = :holder\n",
            ),
            "sql.leases.release_keeps_it": ("SET expires_at = :now - 1", "SET expires_at = :now"),
        },
    ),
)

KILLED = {"killed", "timeout", "segfault", "caught by type check"}
SURVIVED = {"survived", "no tests", "suspicious"}


def equivalents() -> dict[str, str]:
    """Mutant name -> why it cannot be told apart from the original."""
    found = {}
    for line in EQUIVALENT.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition(" ")
            found[name] = why.strip()
    return found


def _scratch(into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(
                source, into / name, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis")
            )
        else:
            shutil.copy2(source, into / name)
    (into / "pyproject.toml").write_text(_pytest_settings())
    return into


def _pytest_settings() -> str:
    """pytest's section of the real pyproject.toml, alone.

    mutmut starts over when pyproject.toml changes at all; keeping the rest of the real
    one out (dependencies, lint and coverage settings) keeps a kept --work incremental.
    """
    real = (ROOT / "pyproject.toml").read_text()
    start = real.index("[tool.pytest.ini_options]")
    end = real.find("\n[", start)
    return real[start:] if end < 0 else real[start : end + 1]


def _configure(project: Path, group: Group) -> None:
    settings = {
        "source_paths": ["store", "bot", "pipelines"],
        "only_mutate": list(group.modules),
        "also_copy": ["docs/schema"],  # beside the tests in mutmut's own copy too
        "pytest_add_cli_args_test_selection": list(group.tests),
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q"],
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in settings.items()]
    with (project / "pyproject.toml").open("a") as config:
        config.write("\n".join(lines) + "\n")


def _mutmut(project: Path, *args: str) -> None:
    with (project / "mutmut.log").open("ab") as out:
        code = subprocess.call([str(MUTMUT), *args], cwd=project, stdout=out, stderr=out)
    if code != 0:
        raise SystemExit(f"mutmut {args[0]} failed in {project} (exit {code}); see mutmut.log")


def _outcomes(project: Path) -> dict[str, str]:
    listed = subprocess.run(
        [str(MUTMUT), "results", "--all", "true"],
        cwd=project,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(re.findall(r"^\s*(\S+): (.+)$", listed, flags=re.MULTILINE))


def run_group(name: str, group: Group, work: Path, children: int, show: bool) -> dict[str, str]:
    """Mutate the group's modules and run its tests against each mutant.

    A kept work folder (--work) makes a second run incremental: mutmut re-tests the
    functions whose source changed, and the survivors are tried again against the
    current tests (new tests can only kill more).
    """
    project = work / name
    again = (project / "mutants").is_dir()
    if again:
        for sub in COPIED:  # copied anew below: the tests and code as they are now
            shutil.rmtree(project / sub)
    else:
        project.mkdir(parents=True)
    _scratch(project)
    _configure(project, group)
    _mutmut(project, "run", "--max-children", str(children))
    survivors = [m for m, status in _outcomes(project).items() if status in SURVIVED]
    if again and survivors:
        _mutmut(project, "run", "--max-children", str(children), *survivors)
    outcomes = _outcomes(project)
    if show:
        for mutant, status in sorted(outcomes.items()):
            if status in SURVIVED:
                print(subprocess.run(
                    [str(MUTMUT), "show", mutant], cwd=project, capture_output=True, text=True
                ).stdout)  # fmt: skip
    return outcomes


def run_sql(work: Path) -> dict[str, str]:
    shutil.rmtree(work / "sql", ignore_errors=True)
    project = _scratch(work / "sql")
    outcomes = {}
    for step in SQL:
        query = project / step.file
        original = query.read_text()
        for name, (old, new) in step.mutants.items():
            if original.count(old) != 1:
                raise SystemExit(f"{name}: {old!r} is not once in {step.file}; update SQL")
            query.write_text(original.replace(old, new))
            code = subprocess.call(
                [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *step.tests],
                cwd=project,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            outcomes[name] = "killed" if code == 1 else "survived" if code == 0 else f"error {code}"
        query.write_text(original)
    return outcomes


def summarise(outcomes: dict[str, str]) -> dict[str, object]:
    explained = equivalents()
    killed = sum(status in KILLED for status in outcomes.values())
    survivors = sorted(m for m, status in outcomes.items() if status in SURVIVED)
    unknown = sorted(m for m, status in outcomes.items() if status not in KILLED | SURVIVED)
    for mutant in survivors:
        why = explained.get(mutant)
        print(f"  survived {mutant}: {why or 'UNEXPLAINED'}")
    for mutant in unknown:
        print(f"  not run  {mutant}: {outcomes[mutant]}")
    # mutmut numbers a function's mutants afresh when the function changes: a line for a
    # mutant that ran and was killed explains nothing now, and may hide a renumbered one.
    stale = sorted(m for m in explained if m in outcomes and outcomes[m] in KILLED)
    for mutant in stale:
        print(f"  stale    {mutant}: killed, yet listed in {EQUIVALENT.name}")
    unexplained = [m for m in survivors if m not in explained]
    equivalent = len(survivors) - len(unexplained)
    print(
        f"  mutants {len(outcomes)}, killed {killed}, survived {len(survivors)} "
        f"({equivalent} equivalent, {len(unexplained)} unexplained, {len(stale)} stale lines)"
    )
    total = killed + len(survivors)
    return {
        "bench": "mutants",
        "killed": killed,
        "survived": len(survivors),
        "unexplained": len(unexplained),
        "stale": len(stale),
        "score": round(killed / total, 4) if total else 0.0,
    }


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench mutants")
    parser.add_argument("--only", nargs="*", choices=[*GROUPS, "sql"], default=list(DEFAULT))
    parser.add_argument("--children", type=int, default=1, help="mutants run at once")
    parser.add_argument("--show", action="store_true", help="print each survivor's diff")
    parser.add_argument("--work", type=Path, help="keep the scratch copies here, to rerun fast")
    parser.add_argument(
        "--smoke", action="store_true", help="check every group and SQL mutation, run none (CI)"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="gatehouse-mutants-") as tmp:
            print(json.dumps(mutants_dry.check(Path(tmp))))
        return

    def run_in(work: Path) -> dict[str, str]:
        outcomes: dict[str, str] = {}
        for name in args.only:
            found = (
                run_sql(work)
                if name == "sql"
                else run_group(name, GROUPS[name], work, args.children, args.show)
            )
            killed = sum(status in KILLED for status in found.values())
            print(f"{name}: {killed} of {len(found)} killed", flush=True)
            outcomes.update(found)
        return outcomes

    def run_all() -> dict[str, str]:
        if args.work:
            return run_in(args.work.resolve())
        with tempfile.TemporaryDirectory(prefix="gatehouse-mutants-") as tmp:
            return run_in(Path(tmp))

    outcomes = await asyncio.to_thread(run_all)
    print(json.dumps(summarise(outcomes)))
