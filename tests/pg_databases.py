"""PostgreSQL databases for tests: one per run, made from a migrated template.

    server = Server.find()           # server.unreachable says why not, or is None
    with server.run_database():      # creates, migrates; drops both databases after
        url = server.run_url

Names start with `gh_pgcore_` and end with the test process's id, so two runs at
once never share one, and a run that was killed is cleaned up by the next.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from store.backends import pg, pg_conn

#: The server tests use: the environment's, or the local one (trust auth, user postgres).
ADMIN_URL = os.environ.get(
    "GATEHOUSE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PREFIX = "gh_pgcore_"


def url_for(admin_url: str, name: str) -> str:
    """The same server and user, another database."""
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@dataclass
class Server:
    admin_url: str
    #: Why no server could be used (None: it can).
    unreachable: str | None = None
    run_url: str = ""
    #: The run database's tables as migrated; a table a test creates is dropped after it.
    tables: tuple[str, ...] = ()

    @classmethod
    def find(cls, admin_url: str = ADMIN_URL) -> Server:
        try:
            with psycopg.connect(admin_url, connect_timeout=3):
                pass
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return cls(admin_url, unreachable=f"{reason} (set GATEHOUSE_TEST_DATABASE_URL)")
        server = cls(admin_url)
        server._drop_abandoned()
        return server

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.admin_url, autocommit=True)

    def create(self, name: str, template: str | None = None) -> str:
        """A new empty database (or a copy of `template`); returns its URL."""
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with self._admin() as conn:
            conn.execute(query)
        return url_for(self.admin_url, name)

    def drop(self, name: str) -> None:
        with self._admin() as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    @contextlib.contextmanager
    def run_database(self) -> Iterator[str]:
        """This run's database, migrated from the template; both dropped at the end."""
        template, run = f"{PREFIX}tpl_{os.getpid()}", f"{PREFIX}run_{os.getpid()}"
        try:
            conn = pg_conn.connect(self.create(template))
            try:
                pg.apply_migrations(conn)
            finally:
                conn.close()
            self.run_url = self.create(run, template=template)
            with psycopg.connect(self.run_url) as made:
                self.tables = tuple(_tables(made))
            yield self.run_url
        finally:
            self.drop(run)
            self.drop(template)

    def empty_tables(self) -> None:
        """The run's database as migrated: tables emptied (ids from 1), any other dropped."""
        with psycopg.connect(self.run_url, autocommit=True) as conn:
            extra = [name for name in _tables(conn) if name not in self.tables]
            if extra:
                names = sql.SQL(", ").join(sql.Identifier(name) for name in extra)
                conn.execute(sql.SQL("DROP TABLE {} CASCADE").format(names))
            emptied = [name for name in self.tables if name != "schema_migrations"]
            names = sql.SQL(", ").join(sql.Identifier(name) for name in emptied)
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(names))

    def _drop_abandoned(self) -> None:
        """Databases of earlier runs whose process is gone (killed before it dropped them)."""
        with self._admin() as conn:
            names = [
                str(row[0])
                for row in conn.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s", (PREFIX + "%",)
                )
            ]
        for name in names:
            pid = name.rsplit("_", 1)[-1]
            if pid.isdigit() and not _alive(int(pid)):
                self.drop(name)


def _tables(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    query = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
    return [str(row[0]) for row in conn.execute(query)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
