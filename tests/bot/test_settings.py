"""Settings: bad values are reported by variable name and reason, never by value."""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from bot import settings


def test_defaults_and_nesting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEHOUSE_TELEGRAM__OPERATORS", "11, 22")
    monkeypatch.setenv("GATEHOUSE_TELEGRAM__TOKEN", "123:secret-token")
    monkeypatch.setenv("GATEHOUSE_STORE__SYNCHRONOUS", "NORMAL")
    loaded = settings.load()
    assert loaded.telegram.operators == [11, 22]
    assert loaded.store.synchronous == "NORMAL"
    assert loaded.data_dir == Path("data")
    assert "secret-token" not in repr(loaded)


def test_dotenv_file_is_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("GATEHOUSE_DATA_DIR=/srv/gatehouse\n")
    assert settings.load().data_dir == Path("/srv/gatehouse")


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("GATEHOUSE_STORE__SYNCHRONOUS", "s3cr3t-VALUE", "must be one of 'FULL' or 'NORMAL'"),
        ("GATEHOUSE_TELEGRAM__OPERATORS", "12,s3cr3t-VALUE", "must be Telegram user ids"),
        ("GATEHOUSE_TELEGRAM__WEBHOOK_PORT", "s3cr3t-VALUE", "must be a whole number"),
        ("GATEHOUSE_TELEGRAM__WEBHOOK_PORT", "-1", "must be at least 1"),
    ],
)
def test_bad_setting_names_the_path_not_the_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str, reason: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(name, value)
    with pytest.raises(settings.SettingsInvalid) as caught:
        settings.load()
    message = str(caught.value)
    assert f"{name}: {reason}" in message.splitlines()[1]
    assert "Input should" not in message  # pydantic's wording is translated
    assert "s3cr3t-VALUE" not in message


def test_a_settler_who_is_no_operator_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEHOUSE_TELEGRAM__OPERATORS", "11,22")
    monkeypatch.setenv("GATEHOUSE_TELEGRAM__SETTLERS", "22,33")
    with pytest.raises(settings.SettingsInvalid) as caught:
        settings.load()
    assert (
        "GATEHOUSE_TELEGRAM__SETTLERS: must be operators too: 33 not in "
        "GATEHOUSE_TELEGRAM__OPERATORS"
    ) in str(caught.value)
    monkeypatch.setenv("GATEHOUSE_TELEGRAM__SETTLERS", "22")
    assert settings.load().telegram.settlers == [22]


def test_cli_exits_2_on_a_bad_setting(tmp_path: Path) -> None:
    env = {**os.environ, "GATEHOUSE_STORE__SYNCHRONOUS": "s3cr3t-VALUE"}
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "status"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "GATEHOUSE_STORE__SYNCHRONOUS" in done.stderr
    assert "s3cr3t-VALUE" not in done.stderr + done.stdout
    assert not (tmp_path / "data").exists()


def check_with_prices(tmp_path: Path, value: str) -> subprocess.CompletedProcess[str]:
    """`gatehouse check` with GATEHOUSE_PRICES set to `value`."""
    env = {**os.environ, "GATEHOUSE_PRICES": value, "GATEHOUSE_DATA_DIR": str(tmp_path / "d")}
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "check"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_prices_that_are_not_json_are_named_and_never_echoed(tmp_path: Path) -> None:
    done = check_with_prices(tmp_path, "{'gpt-4o-mini': 's3cr3t-VALUE'}")
    assert done.returncode == 2
    assert "GATEHOUSE_PRICES: not valid JSON (Expecting property name" in done.stderr
    assert "micro-dollars per million tokens ($0.15 is 150000)" in done.stderr
    assert "EnvSettingsSource" not in done.stderr
    assert "s3cr3t-VALUE" not in done.stderr + done.stdout


def test_a_price_in_dollars_names_the_model_the_field_and_the_unit(tmp_path: Path) -> None:
    price = '{"gpt-4o-mini": {"input_micros_per_mtok": 0.17, "output_micros_per_mtok": 600000}}'
    done = check_with_prices(tmp_path, price)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[1].strip() == (
        "GATEHOUSE_PRICES: model 'gpt-4o-mini', input_micros_per_mtok: must be a whole number"
    )
    assert "integer micro-dollars per million tokens ($0.15 is 150000)" in lines[2]
    assert "GATEHOUSE_PRICES__" not in done.stderr  # a variable nobody set
    assert "0.17" not in done.stderr + done.stdout


def test_cli_exits_2_on_an_unsafe_data_dir(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    loose.chmod(0o755)
    env = {**os.environ, "GATEHOUSE_DATA_DIR": str(loose)}
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "status"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "chmod 700" in done.stderr


def _cli(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_cli_never_advises_chmod_on_a_shared_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # what /tmp is: everyone's, sticky
    done = _cli(tmp_path, "--data-dir", str(shared), "status")
    assert done.returncode == 2
    assert "chmod 700" not in done.stderr
    assert "sticky" in done.stderr and "a directory of its own" in done.stderr
    assert shared.stat().st_mode & 0o7777 == 0o1777


@pytest.mark.parametrize("env", [{}, {"GATEHOUSE_DATA_DIR": ""}])
def test_cli_refuses_an_empty_data_dir(tmp_path: Path, env: dict[str, str]) -> None:
    args = ["status"] if env else ["--data-dir", "", "status"]
    done = _cli(tmp_path, *args, env=env)
    assert done.returncode == 2
    assert "data directory is empty" in done.stderr or "DATA_DIR: is empty" in done.stderr


def _variables(model: type[BaseModel], prefix: str) -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        nested = [
            a
            for a in typing.get_args(annotation) or (annotation,)
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if nested and name != "prices":
            names += _variables(nested[0], f"{prefix}{name.upper()}__")
        else:
            names.append(prefix + name.upper())
    return names


def test_env_example_documents_every_setting() -> None:
    documented = (Path(__file__).resolve().parents[2] / ".env.example").read_text()
    variables = _variables(settings.Settings, settings.ENV_PREFIX)
    assert len(variables) > 20
    missing = [name for name in variables if f"{name}=" not in documented]
    assert missing == []


@pytest.mark.parametrize(
    "url", ["mysql://u:hunter2@h/db", "postgresql://u:hunter2@h/" + "d" * 2100]
)
def test_a_database_url_must_be_postgres_and_is_never_echoed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEHOUSE_DATABASE_URL", url)
    with pytest.raises(
        settings.SettingsInvalid, match=r"GATEHOUSE_DATABASE_URL: .*postgresql"
    ) as bad:
        settings.load()
    assert "hunter2" not in str(bad.value)


def test_a_database_url_reaches_the_store_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEHOUSE_DATABASE_URL", "postgresql://u:hunter2@h/db")
    loaded = settings.load()
    assert "hunter2" not in repr(loaded)
    config = settings.store_config(loaded)
    assert config.database_url == "postgresql://u:hunter2@h/db"
    assert "hunter2" not in repr(config)


def test_every_secret_setting_is_listed_for_redaction(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    held = {
        "GATEHOUSE_DATABASE_URL": "postgresql://u:db-pass-4c1e@h/db",
        "GATEHOUSE_TELEGRAM__WEBHOOK_SECRET": "hook-secret-9b2d",
        "GATEHOUSE_TELEGRAM__CALLBACK_SECRET": "callback-secret-6a7e5f4d3c2b",
        "GATEHOUSE_LLM__API_KEY": "sk-llm-key-1f0e",
    }
    for name, value in held.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GATEHOUSE_LLM__KIND", "openai")
    monkeypatch.setenv("GATEHOUSE_LLM__MODEL", "m")
    found = settings.load().secrets()
    assert set(held.values()) | {"db-pass-4c1e"} == set(found)


TOKEN = "123456:s3cr3t-VALUE-AAEEhh_k"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (TOKEN + "\n", "holds a control character (a trailing newline?)"),
        (TOKEN + "\r\n", "holds a control character (a trailing newline?)"),
        (TOKEN[:8] + "\n" + TOKEN[8:], "holds a control character (a line break)"),
        (TOKEN + "\t", "holds a control character (a tab)"),
        (TOKEN[:8] + "\x07" + TOKEN[8:], "holds a control character (U+0007)"),
        ("\ufeff" + TOKEN, "holds an invisible character (U+FEFF)"),
        (TOKEN + " ", "holds a space: a token is one word, with nothing around it"),
    ],
)
def test_a_token_with_a_control_character_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, token: str, reason: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEHOUSE_TELEGRAM__TOKEN", token)
    with pytest.raises(settings.SettingsInvalid) as caught:
        settings.load()
    assert str(caught.value).splitlines()[1:] == [f"  GATEHOUSE_TELEGRAM__TOKEN: {reason}"]
    assert "s3cr3t" not in str(caught.value)


def test_a_webhook_secret_with_a_trailing_newline_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEHOUSE_TELEGRAM__WEBHOOK_SECRET", "s3cr3t-VALUE\n")
    with pytest.raises(settings.SettingsInvalid, match="WEBHOOK_SECRET: holds a control"):
        settings.load()


@pytest.mark.parametrize("command", ["check", "run"])
def test_check_and_start_exit_2_on_a_token_read_from_a_file_with_its_newline(
    tmp_path: Path, command: str
) -> None:
    # `echo token > file`, then an env file that quotes it in: the newline comes along.
    (tmp_path / "gatehouse.env").write_text(
        f'GATEHOUSE_TELEGRAM__TOKEN="{TOKEN}\\n"\nGATEHOUSE_TELEGRAM__OPERATORS=11\n'
    )
    data_dir = tmp_path / "data"
    done = _cli(tmp_path, "--env-file", "gatehouse.env", "--data-dir", str(data_dir), command)
    assert done.returncode == 2, done.stderr
    assert (
        "GATEHOUSE_TELEGRAM__TOKEN: holds a control character (a trailing newline?)" in done.stderr
    )
    assert "s3cr3t" not in done.stderr + done.stdout
    assert "unreachable" not in done.stderr
