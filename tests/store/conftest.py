"""Every store test runs on both backends: the `store` and `store_config` fixtures
here are parametrised by `dialect` (SQLite, PostgreSQL).

PostgreSQL tests use one database per test run, made from a migrated template and
dropped after; each test starts from empty tables. The server is the one at
GATEHOUSE_TEST_DATABASE_URL (default: the local one, user postgres); with none
reachable, the PostgreSQL variants skip and say why. A test marked `sqlite_only`
(it reads SQLite's own files, pragmas or query plans) runs on SQLite alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from store import db
from tests import pg_databases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "dialect" in metafunc.fixturenames:
        only_sqlite = metafunc.definition.get_closest_marker("sqlite_only") is not None
        metafunc.parametrize("dialect", ["sqlite"] if only_sqlite else ["sqlite", "postgres"])


@pytest.fixture(scope="session")
def pg_run_database() -> Iterator[pg_databases.Server]:
    """This run's PostgreSQL database (migrated), or a skip saying why there is none."""
    server = pg_databases.Server.find()
    if server.unreachable:
        pytest.skip(f"no PostgreSQL server: {server.unreachable}")
    with server.run_database():
        yield server


@pytest.fixture
def store_config(request: pytest.FixtureRequest, dialect: str, data_dir: Path) -> db.StoreConfig:
    if dialect == "sqlite":
        return db.StoreConfig(data_dir=data_dir)
    server: pg_databases.Server = request.getfixturevalue("pg_run_database")
    server.empty_tables()
    return db.StoreConfig(data_dir=data_dir, database_url=server.run_url)


@pytest.fixture
async def store(store_config: db.StoreConfig) -> AsyncIterator[db.Store]:
    opened = await db.Store.open(store_config)
    try:
        yield opened
    finally:
        await opened.close()
