"""Schema: migrations replay to exactly the canonical schema, atomically."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from store import errors, migrate, sql

ROOT = Path(migrate.__file__).resolve().parents[1]
#: Every package whose modules may load named SQL.
PACKAGES = ("store", "pipelines", "bot")


def _normalized_schema(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    rows = conn.execute(
        "SELECT type, name, sql FROM sqlite_master"
        " WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type, name"
    )

    def norm(text: str) -> str:
        text = re.sub(r"--[^\n]*", "", text)
        text = re.sub(r"\s+", " ", text).strip()
        return re.sub(r"\s*([(),])\s*", r"\1", text)

    return [(kind, name, norm(text)) for kind, name, text in rows]


def test_migrations_replay_to_the_canonical_schema(tmp_path: Path) -> None:
    canonical = sqlite3.connect(tmp_path / "canonical.db", isolation_level=None)
    canonical.executescript((sql.SQL_DIR / "schema.sql").read_text())
    replayed = sqlite3.connect(tmp_path / "replayed.db", isolation_level=None)
    applied = migrate.apply_pending(replayed)
    assert applied == [m.version for m in migrate.discover()]
    assert _normalized_schema(replayed) == _normalized_schema(canonical)


def test_applying_again_is_a_no_op(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    migrate.apply_pending(conn)
    assert migrate.apply_pending(conn) == []


def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path) -> None:
    directory = tmp_path / "migrations"
    directory.mkdir()
    (directory / "0001_ok.sql").write_text("CREATE TABLE a (x);")
    (directory / "0002_bad.sql").write_text("CREATE TABLE b (x);\nINSERT INTO nowhere VALUES (1);")
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    with pytest.raises(errors.MigrationError, match=r"0002_bad\.sql failed"):
        migrate.apply_pending(conn, directory)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert tables == {"schema_migrations", "a"}
    assert migrate.applied_versions(conn) == {1}


def test_a_gap_in_numbering_is_refused(tmp_path: Path) -> None:
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (x);")
    (tmp_path / "0003_c.sql").write_text("CREATE TABLE c (x);")
    with pytest.raises(errors.MigrationError, match="0002 is missing"):
        migrate.discover(tmp_path)


def test_a_newer_database_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    migrate.apply_pending(conn)
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    with pytest.raises(errors.MigrationError, match="newer than this gatehouse knows"):
        migrate.apply_pending(conn)


def test_every_sql_file_parses_and_every_used_name_exists() -> None:
    used = re.compile(r'\bQ\["([a-z_0-9]+)"\]')
    loaded = re.compile(r'^Q = sql\.load\("([a-z_]+)"\)', re.MULTILINE)
    checked = 0
    modules = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    for module in modules:
        text = module.read_text()
        match = loaded.search(text)
        if not match:
            continue
        queries = sql.load(match.group(1))
        for name in used.findall(text):
            assert name in queries, (
                f"{module.relative_to(ROOT)} uses Q[{name!r}], missing from {match.group(1)}.sql"
            )
            checked += 1
    assert checked > 10
    for path in sql.SQL_DIR.glob("*.sql"):
        if path.name != "schema.sql":
            assert sql.load(path.stem), f"{path.name} defines no queries"


def test_sql_parse_rejects_duplicates() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        sql.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
