"""Every store test runs on both backends: the `store` and `store_config` fixtures
here are parametrised by `dialect` (SQLite, PostgreSQL).

PostgreSQL tests use one database per test run, made from a migrated template and
dropped after; each test starts from empty tables. The server is the one at
GATEHOUSE_TEST_DATABASE_URL (default: the local one, user postgres); with none
reachable, the PostgreSQL variants skip and say why. A test marked `sqlite_only`
(it reads SQLite's own files, pragmas or query plans) runs on SQLite alone.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator
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
def fresh_store_config(
    request: pytest.FixtureRequest, dialect: str, data_dir: Path
) -> Callable[[], db.StoreConfig]:
    """An empty store's config on every call (a test opening many stores, one per
    Hypothesis example, say): a new data directory (the first: `data_dir`), or the
    run's database emptied."""
    server: pg_databases.Server | None = None
    if dialect == "postgres":
        server = request.getfixturevalue("pg_run_database")
    made = itertools.count()

    def fresh() -> db.StoreConfig:
        n = next(made)
        directory = data_dir.with_name(f"{data_dir.name}-{n}") if n else data_dir
        if server is None:
            return db.StoreConfig(data_dir=directory)
        server.empty_tables()
        return db.StoreConfig(data_dir=directory, database_url=server.run_url)

    return fresh


@pytest.fixture
def store_config(fresh_store_config: Callable[[], db.StoreConfig]) -> db.StoreConfig:
    return fresh_store_config()


@pytest.fixture
async def store(store_config: db.StoreConfig) -> AsyncIterator[db.Store]:
    opened = await db.open(store_config)
    try:
        yield opened
    finally:
        await opened.close()
