"""The compose file for several workers: one PostgreSQL, three workers that all use it,
each worker's own state on its own volume, and no password written into the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def compose() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((DEPLOY / "docker-compose.postgres.yml").read_text())
    return found


def test_three_workers_share_one_database() -> None:
    services = compose()["services"]
    workers = {name: s for name, s in services.items() if name.startswith("gatehouse-")}
    assert len(workers) == 3 and "postgres" in services
    urls = {s["environment"]["GATEHOUSE_DATABASE_URL"] for s in workers.values()}
    assert len(urls) == 1 and next(iter(urls)).startswith("postgresql://gatehouse:")
    assert "@postgres:5432/gatehouse" in next(iter(urls))
    for worker in workers.values():
        assert worker["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert worker["read_only"] is True


def test_each_worker_keeps_its_own_state_on_its_own_volume() -> None:
    workers = [s for name, s in compose()["services"].items() if name.startswith("gatehouse-")]
    data_dirs = {w["environment"]["GATEHOUSE_DATA_DIR"] for w in workers}
    assert data_dirs == {"/data/gatehouse"}
    volumes = [v for w in workers for v in w["volumes"] if v.endswith(":/data")]
    assert len(set(volumes)) == 3


def test_the_password_comes_from_the_environment() -> None:
    text = (DEPLOY / "docker-compose.postgres.yml").read_text()
    assert "${POSTGRES_PASSWORD:?" in text
    postgres = compose()["services"]["postgres"]
    assert postgres["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD")
