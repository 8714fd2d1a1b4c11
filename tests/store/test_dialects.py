"""The PostgreSQL dialect: its migrations, its query overrides, its parameters, its errors."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from store import db, errors, sql
from store.backends import generate, migrate, pg, pg_conn
from store.intake import seen
from tests import pg_databases

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

#: What the catalog says of every object in the public schema, one text per object.
CATALOG = """
SELECT 'column ' || c.table_name || '.' || c.column_name || ' ' || c.data_type || ' '
       || c.is_nullable || ' ' || coalesce(c.column_default, '') || ' ' || c.is_identity
  FROM information_schema.columns c WHERE c.table_schema = 'public'
UNION ALL
SELECT 'constraint ' || t.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
  FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = 'public'
UNION ALL
SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(g.oid) FROM pg_trigger g WHERE NOT g.tgisinternal
UNION ALL
SELECT 'function ' || pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
ORDER BY 1
"""


@pytest.fixture
def scratch(pg_run_database: pg_databases.Server) -> Iterator[dict[str, str]]:
    """Empty databases on demand, by name: `scratch["a"]` is a URL; dropped after."""
    server, made = pg_run_database, {}

    class Made(dict[str, str]):
        def __missing__(self, key: str) -> str:
            name = f"{pg_databases.PREFIX}{key}_{os.getpid()}"
            server.drop(name)
            self[key] = made[name] = server.create(name)
            return self[key]

    yield Made()
    for name in made:
        server.drop(name)


def _catalog(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [re.sub(r"\s+", " ", str(row[0])).strip() for row in conn.execute(CATALOG)]


def test_postgres_migrations_replay_to_its_canonical_schema(scratch: dict[str, str]) -> None:
    with psycopg.connect(scratch["canonical"], autocommit=True) as conn:
        conn.execute(generate.POSTGRES_SCHEMA.read_text().encode())
    replayed = pg_conn.connect(scratch["replayed"])
    try:
        applied = pg.apply_migrations(replayed)
        assert pg.apply_migrations(replayed) == []  # applying again is a no-op
    finally:
        replayed.close()
    assert applied == [m.version for m in migrate.discover(pg.MIGRATIONS_DIR)]
    assert _catalog(scratch["replayed"]) == _catalog(scratch["canonical"])


def test_the_postgres_schema_file_is_generated_from_its_migrations(
    pg_run_database: pg_databases.Server,
) -> None:
    made = generate.postgres_schema(pg_run_database.admin_url)
    assert generate.POSTGRES_SCHEMA.read_text() == made, "run `python3 dev.py schema`"


def test_every_migration_has_its_postgres_twin_of_the_same_number() -> None:
    sqlite = [(m.version, m.name) for m in migrate.discover()]
    postgres = [(m.version, m.name) for m in migrate.discover(pg.MIGRATIONS_DIR)]
    assert postgres == sqlite


def test_a_failing_postgres_migration_leaves_nothing_behind(
    scratch: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "0001_ok.sql").write_text("CREATE TABLE a (x BIGINT);")
    (tmp_path / "0002_bad.sql").write_text(
        "CREATE TABLE b (x BIGINT);\nINSERT INTO nowhere VALUES (1);"
    )
    conn = pg_conn.connect(scratch["failing"])
    try:
        with pytest.raises(errors.MigrationError, match=r"0002_bad\.sql failed.*nowhere"):
            pg.apply_migrations(conn, tmp_path)
        tables = {
            row[0]
            for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        assert tables == {"schema_migrations", "a"}
    finally:
        conn.close()


async def test_workers_starting_together_migrate_once(
    scratch: dict[str, str], tmp_path: Path
) -> None:
    config = db.StoreConfig(data_dir=tmp_path, database_url=scratch["together"], writers=1)
    opened = await asyncio.gather(*(db.open(config) for _ in range(3)))
    try:
        rows = await opened[0].read(
            lambda c: c.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()
        )
        assert [row[0] for row in rows] == [m.version for m in migrate.discover()]
    finally:
        await asyncio.gather(*(store.close() for store in opened))


def test_every_override_replaces_a_shared_query_of_the_same_name() -> None:
    for path in sorted(sql.POSTGRES_DIR.glob("*.sql")):
        shared = sql.load(path.stem)
        for name in sql.parse(path.read_text(), str(path)):
            assert name in shared, f"{path.name}: {name!r} overrides no query in {path.stem}.sql"


def test_an_override_is_chosen_by_name_and_parameters_take_psycopg_style() -> None:
    query = sql.load("items")["in_state"]
    assert "CAST(%(pipeline)s AS text) IS NULL" in sql.postgres(query)
    assert sql.postgres(sql.load("items")["get"]).endswith("WHERE id = %(id)s")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = :a AND y = :b_2", "x = %(a)s AND y = %(b_2)s"),
        ("x::bigint = ?", "x::bigint = %s"),
        ("x LIKE :p || '%'", "x LIKE %(p)s || '%%'"),
        (
            "x = ':not' -- it's :not either\n AND y = :y",
            "x = ':not' -- it's :not either\n AND y = %(y)s",
        ),
        ('SELECT "odd:name" FROM t', 'SELECT "odd:name" FROM t'),
    ],
)
def test_store_parameters_become_psycopg_parameters(text: str, expected: str) -> None:
    assert sql.postgres(text) == expected


@pytest.mark.parametrize(
    ("statement", "kind"),
    [
        ("INSERT INTO t VALUES (1), (1)", errors.ConstraintViolation),
        ("INSERT INTO t VALUES (NULL)", errors.ConstraintViolation),
        ("SELECT * FROM nowhere", errors.StoreError),
    ],
)
async def test_driver_errors_reach_callers_as_the_store_s_own(
    pg_run_database: pg_databases.Server, tmp_path: Path, statement: str, kind: type[Exception]
) -> None:
    pg_run_database.empty_tables()
    config = db.StoreConfig(data_dir=tmp_path, database_url=pg_run_database.run_url)
    store = await db.open(config)
    try:
        await store.write(lambda c: c.execute("CREATE TABLE t (x BIGINT NOT NULL UNIQUE)"))
        with pytest.raises(kind) as caught:
            await store.write(lambda c: c.execute(statement))
        assert type(caught.value).__module__ == "store.errors"
    finally:
        await store.close()


def test_a_database_url_is_never_shown() -> None:
    config = db.StoreConfig(data_dir=Path("d"), database_url="postgresql://u:hunter2@h/db")
    assert "hunter2" not in repr(config)


async def test_a_connection_the_server_dropped_is_opened_again(
    pg_run_database: pg_databases.Server, tmp_path: Path
) -> None:
    """After a server restart the unit in flight fails alone; the next one reconnects."""
    pg_run_database.empty_tables()
    url = pg_run_database.run_url
    config = db.StoreConfig(data_dir=tmp_path, database_url=url, writers=1, readers=1)
    store = await db.open(config)
    try:
        await store.write(seen.mark_seen_sync, "news", "feed", ["a"], NOW)
        with psycopg.connect(url, autocommit=True) as admin:
            # The timeout makes the call wait until each backend has exited: without it
            # the next unit may still reach its backend and the one after meet the goodbye.
            admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid != pg_backend_pid()"
            )
        with contextlib.suppress(errors.StoreError):  # the server's goodbye may arrive here
            await store.write(seen.mark_seen_sync, "news", "feed", ["b"], NOW)
        with contextlib.suppress(errors.StoreError):
            await store.read(seen.filter_unseen_sync, "news", "feed", ["c"])
        assert await store.write(seen.mark_seen_sync, "news", "feed", ["c"], NOW) == ["c"]
        assert await store.read(seen.filter_unseen_sync, "news", "feed", ["a", "d"]) == ["d"]
    finally:
        await store.close()


def _numbered(text: str) -> str:
    """A query with each `%(name)s` as `$n` (one number per name), for PREPARE."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match.group(1), len(numbers) + 1)}"

    return re.sub(r"%\((\w+)\)s", number, text).replace("%%", "%")


def test_every_query_prepares_on_postgres(pg_run_database: pg_databases.Server) -> None:
    """PostgreSQL plans each statement as the store sends it: a function SQLite has and
    PostgreSQL lacks, or a parameter whose type nothing fixes (`:x IS NULL`), fails here
    for every query at once, not only for those a test happens to run."""
    failed = []
    with psycopg.connect(pg_run_database.run_url) as conn:
        for path in sorted(sql.SQL_DIR.glob("*.sql")):
            for name, query in sql.load(path.stem).items():
                try:
                    conn.execute(f"PREPARE q AS {_numbered(sql.postgres(query))}".encode())
                    conn.execute("DEALLOCATE q")
                except psycopg.Error as exc:
                    conn.rollback()
                    failed.append(f"{path.stem}.{name}: {str(exc).splitlines()[0]}")
        conn.rollback()
    assert failed == []


async def test_a_server_that_does_not_answer_is_a_store_error(tmp_path: Path) -> None:
    url = "postgresql://gatehouse:hunter2@127.0.0.1:1/gh"
    with pytest.raises(errors.ConnectionLost, match="connection failed") as caught:
        await db.open(db.StoreConfig(data_dir=tmp_path, database_url=url))
    assert "hunter2" not in str(caught.value)


def test_a_database_sorting_text_by_language_is_named_at_start(
    pg_run_database: pg_databases.Server, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"{pg_databases.PREFIX}icu_{os.getpid()}"
    with psycopg.connect(pg_run_database.admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(
            f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en'"
        )
    try:
        conn = pg_conn.connect(pg_databases.url_for(pg_run_database.admin_url, name))
        try:
            with caplog.at_level("WARNING", logger="store.backends.pg"):
                assert pg._check_collation(conn) is False
            assert "does not sort text by code point" in caplog.text
        finally:
            conn.close()
        conn = pg_conn.connect(pg_run_database.run_url)
        try:
            assert pg._check_collation(conn) is True
        finally:
            conn.close()
    finally:
        pg_run_database.drop(name)
