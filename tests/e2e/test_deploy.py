"""The deploy files work as written: units verify, and the store lands where the docs say.

systemd lets `EnvironmentFile=` override `Environment=`, and compose lets `environment:`
override `env_file:`, which overrides the image's `ENV`. These tests resolve each
environment with those rules and ask the real settings loader where the store goes.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml
from dotenv import dotenv_values

from bot import settings
from bot.cli import main as cli
from pipelines.service import leader, runtime

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNITS = ("gatehouse.service", "gatehouse-backup.service", "gatehouse-backup.timer")


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / name)
    return parser


def _data_dir(env: dict[str, str], cwd: PurePosixPath, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the settings loader puts the store in this environment, run from `cwd`."""
    for name in [name for name in os.environ if name.startswith("GATEHOUSE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT / "tests")  # no .env here: only `env` counts
    args = cli._parser()[0].parse_args(["status"])
    data_dir = settings.load_for(args.env_file, args.data_dir).data_dir
    return str(cwd / data_dir)  # a relative path resolves from the working directory


def _env_file(path: Path) -> dict[str, str]:
    return {k: v for k, v in dotenv_values(path).items() if v is not None}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_units_verify(tmp_path: Path) -> None:
    # verify insists that ExecStart's binary exists: point it at this checkout's.
    gatehouse = Path(sys.executable).parent / "gatehouse"
    for name in UNITS:
        text = (
            (DEPLOY / name)
            .read_text()
            .replace("/opt/gatehouse/.venv/bin/gatehouse", str(gatehouse))
        )
        (tmp_path / name).write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / name) for name in UNITS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_unit_takes_its_environment_from_one_file(monkeypatch: pytest.MonkeyPatch) -> None:
    service = _unit("gatehouse.service")["Service"]
    assert "Environment" not in service  # nothing for EnvironmentFile= to fight
    assert service["EnvironmentFile"] == "/etc/gatehouse/gatehouse.env"
    state = PurePosixPath("/var/lib") / service["StateDirectory"]
    cwd = PurePosixPath(service["WorkingDirectory"])
    written = _data_dir(_env_file(DEPLOY / "gatehouse.env"), cwd, monkeypatch)
    assert written == str(state)
    # An operator who copies .env.example instead still gets a store inside the state dir.
    copied = _data_dir(_env_file(ROOT / ".env.example"), cwd, monkeypatch)
    assert PurePosixPath(copied).is_relative_to(state)


def test_the_backup_unit_reads_the_same_settings() -> None:
    backup = _unit("gatehouse-backup.service")["Service"]
    service = _unit("gatehouse.service")["Service"]
    assert backup["EnvironmentFile"] == service["EnvironmentFile"]
    assert service["StateDirectory"] in backup["StateDirectory"].split()
    assert "gatehouse backup" in backup["ExecStart"]
    assert "-mtime" in backup["ExecStartPost"]  # retention
    assert _unit("gatehouse-backup.timer")["Timer"]["Persistent"] == "true"


def _image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    lines = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    for line in lines:
        if line.startswith("ENV "):
            for pair in line.removeprefix("ENV ").split():
                name, _, value = pair.partition("=")
                env[name] = value
    return env


@pytest.mark.parametrize("env_file", [ROOT / ".env.example", DEPLOY / "gatehouse.env"])
def test_compose_keeps_the_store_on_its_volume(
    env_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    service = compose["services"]["gatehouse"]
    assert service["read_only"] is True
    env = _image_env() | _env_file(env_file) | service.get("environment", {})
    workdir = next(
        line.split()[1]
        for line in (DEPLOY / "Dockerfile").read_text().splitlines()
        if line.startswith("WORKDIR ")
    )
    store = PurePosixPath(_data_dir(env, PurePosixPath(workdir), monkeypatch))
    mounts = [PurePosixPath(volume.split(":")[1]) for volume in service["volumes"]]
    assert any(store.is_relative_to(mount) for mount in mounts), (store, mounts)


def test_cli_finds_its_config_from_any_directory(tmp_path: Path) -> None:
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    shutil.copy(ROOT / "pipelines" / "examples" / "news.yaml", pipelines)
    env_file = tmp_path / "server.env"
    env_file.write_text(
        f"GATEHOUSE_PIPELINES_DIR={pipelines}\n"
        "GATEHOUSE_TELEGRAM__TOKEN=123:abc\nGATEHOUSE_TELEGRAM__OPERATORS=1001\n"
    )
    data = tmp_path / "data"
    gatehouse = str(Path(sys.executable).parent / "gatehouse")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [gatehouse, *argv], cwd="/", env=env, capture_output=True, text=True, check=False
        )

    checked = run("--env-file", str(env_file), "check", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["pipelines"] == ["news"]
    where = ("--env-file", str(env_file), "--data-dir", str(data))
    assert run("init", *where).returncode == 0
    assert (data / "gatehouse.db").exists()
    paused = run("pause", "news", *where)
    assert paused.returncode == 0, paused.stderr
    status = run(*where, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert [p["paused"] for p in json.loads(status.stdout)["overview"]["pipelines"]] == [True]
    missing = run("--env-file", str(tmp_path / "nope.env"), "status")
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"gatehouse: --env-file {tmp_path / 'nope.env'}: no such file"
    assert not (tmp_path / "nope.env").exists()


def test_run_takes_the_lock_where_its_options_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gatehouse run --env-file F --data-dir D` locks the store the settings will open."""
    from bot import early

    monkeypatch.delenv("GATEHOUSE_DATA_DIR", raising=False)
    env_file = tmp_path / "server.env"
    env_file.write_text("GATEHOUSE_DATA_DIR=/srv/from-file\n")
    assert early.data_dir(env_file) == Path("/srv/from-file")
    assert early.data_dir(env_file, tmp_path / "given") == tmp_path / "given"
    args = cli._parser()[0].parse_args(["run", "--env-file", str(env_file)])
    loaded = settings.load_for(args.env_file, args.data_dir)
    assert loaded.data_dir == early.data_dir(env_file) == Path("/srv/from-file")
    missing = subprocess.run(
        [str(Path(sys.executable).parent / "gatehouse"), "run", "--env-file", "/nope.env"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert (missing.returncode, missing.stderr) == (
        2,
        "gatehouse: --env-file /nope.env: no such file\n",
    )


def test_the_image_ships_no_pipelines_and_a_small_build_context() -> None:
    steps = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    runs = " ".join(line for line in steps if line.startswith(("RUN ", "COPY ")))
    # Example pipelines point at local ports and made-up operators: not in the image.
    assert "examples" not in runs
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()} - {""}
    assert {".venv", "tests", ".git", ".env"} <= ignored
    copied = [line.split()[1] for line in steps if line.startswith("COPY ")]
    assert not [path for path in copied if path.rstrip("/") in ignored]


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.postgres.yml"])
def test_every_compose_file_gives_matplotlib_a_writable_cache(name: str) -> None:
    # The root filesystem is read-only: without it the first chart warns and builds slowly.
    compose = yaml.safe_load((DEPLOY / name).read_text())
    for service in compose["services"].values():
        if "image" in service and service["image"].startswith("gatehouse"):
            assert service["environment"]["MPLCONFIGDIR"].startswith("/tmp/"), name
            assert "/tmp" in service["tmpfs"]


def test_a_clean_stop_fits_the_stop_timeout_every_deploy_file_gives() -> None:
    """The work in flight, then the leader's duties and last signature, with room left
    for closing: otherwise systemd or docker would SIGKILL a stop that was going well."""
    needed = runtime.STOP_WORK_S + leader.STAND_DOWN_S
    given = {"gatehouse.service": float(_unit("gatehouse.service")["Service"]["TimeoutStopSec"])}
    for name in ("docker-compose.yml", "docker-compose.postgres.yml"):
        compose = yaml.safe_load((DEPLOY / name).read_text())
        for service, spec in compose["services"].items():
            if "stop_grace_period" in spec:
                given[f"{name} {service}"] = float(spec["stop_grace_period"].removesuffix("s"))
    assert len(given) >= 3 and all(seconds >= needed + 5 for seconds in given.values()), given
