"""`gatehouse check` finds what would fail later; `--online` asks each real service and
sends nothing to anyone (local Bot API server, fake LLM, Dovecot, aiosmtpd, a webhook)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from bot.demo.botapi import localapi
from pipelines.config import spec
from pipelines.operations import preflight
from pipelines.providers import client as providers
from store.ledger import prices
from tests.fakes import dovecot, smtp_server
from tests.fakes.llm_server import FakeLLM
from tests.fakes.webhook_server import WebhookServer

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "4242:preflight-token"
PRICES = {"fake-model": prices.Price(input_micros_per_mtok=1, output_micros_per_mtok=1)}

LLM_PIPELINE = """
name: writer
schedule: manual
sources: [{type: rss, url: "http://127.0.0.1:9/feed.xml"}]
draft: {drafter: llm, prompt: writer.txt}
dispatch: {type: none}
"""
HOOK_PIPELINE = """
name: hook
schedule: manual
sources: [{{type: rss, url: "http://127.0.0.1:9/feed.xml"}}]
dispatch:
  type: webhook
  url: {url}
  headers: {{Authorization: "env:HOOK_TOKEN"}}
"""


def _load(tmp_path: Path, **files: str) -> dict[str, spec.Pipeline]:
    folder = tmp_path / "pipelines"
    folder.mkdir(exist_ok=True)
    (folder / "writer.txt").write_text("Write a post about {title}: {text}")
    for name, text in files.items():
        (folder / f"{name}.yaml").write_text(text)
    loaded = spec.load_dir(folder)
    assert loaded.errors == []
    return loaded.pipelines


def _llm(url: str, key: str = "right-key") -> providers.ProviderSettings:
    return providers.ProviderSettings(
        kind="openai", base_url=url, api_key=SecretStr(key), model="fake-model"
    )


def test_unset_secrets_and_an_unready_llm_pipeline_are_named(tmp_path: Path) -> None:
    found = _load(tmp_path, writer=LLM_PIPELINE, hook=HOOK_PIPELINE.format(url="http://h/x"))
    bare = preflight.Needs(llm=None, prices={}, budget_scopes=frozenset(), env={})
    assert [str(f) for f in preflight.offline(found, bare)] == [
        "hook: dispatch webhook: environment variable HOOK_TOKEN is not set",
        "writer: llm: no LLM provider configured (GATEHOUSE_LLM__*): "
        "the template drafter would run",
    ]
    priced = preflight.Needs(
        llm=_llm("http://127.0.0.1:9/v1"),
        prices=PRICES,
        budget_scopes=frozenset(),
        env={"HOOK_TOKEN": "t"},
    )
    assert [str(f) for f in preflight.offline(found, priced)] == [
        "writer: llm: no budget: the template drafter would run; set one with "
        "`gatehouse set-budget writer day 5` (or scope global)"
    ]
    budgeted = preflight.Needs(
        llm=priced.llm, prices=PRICES, budget_scopes=frozenset({"global"}), env=priced.env
    )
    assert preflight.offline(found, budgeted) == []


def test_a_triage_that_could_never_run_is_named(tmp_path: Path) -> None:
    block = '\ntriage: {question: "About trams?", model: cheap-model, on_failure: hold}\n'
    found = _load(tmp_path, writer=LLM_PIPELINE + block)
    needs = preflight.Needs(
        llm=_llm("http://127.0.0.1:9/v1"), prices=PRICES, budget_scopes=frozenset({"global"}),
        env={},
    )  # fmt: skip
    assert [str(f) for f in preflight.offline(found, needs)] == [
        "writer: triage: no price for model 'cheap-model' in GATEHOUSE_PRICES: triage cannot "
        "run, so each entry goes on as on_failure: hold"
    ]
    priced = {**PRICES, "cheap-model": PRICES["fake-model"]}
    assert preflight.offline(found, dataclasses.replace(needs, prices=priced)) == []


def test_an_imap_password_from_the_environment_is_checked(tmp_path: Path) -> None:
    mail = """
name: inbox
schedule: manual
sources: [{type: imap, host: 127.0.0.1, username: u, password: "env:MAIL_PASS"}]
dispatch: {type: none}
"""
    found = _load(tmp_path, inbox=mail)
    needs = preflight.Needs(llm=None, prices={}, budget_scopes=frozenset(), env={})
    [problem] = preflight.offline(found, needs)
    assert str(problem) == (
        "inbox: source imap imap:u@127.0.0.1/INBOX: environment variable MAIL_PASS is not set"
    )
    set_env = preflight.Needs(
        llm=None, prices={}, budget_scopes=frozenset(), env={"MAIL_PASS": "x"}
    )
    assert preflight.offline(found, set_env) == []


def _gatehouse(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GATEHOUSE_", "DIGEST_"))}
    return subprocess.run(
        [str(Path(sys.executable).parent / "gatehouse"), *argv],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_check_fails_on_the_examples_until_their_secrets_and_budget_are_set(
    tmp_path: Path,
) -> None:
    """The shipped examples: `digest` needs a webhook token, an LLM, a price and a budget."""
    env = {
        "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
        "GATEHOUSE_PIPELINES_DIR": str(ROOT / "pipelines" / "examples"),
        "GATEHOUSE_TELEGRAM__TOKEN": TOKEN,
        # digest's approvers: its quorum of 2 needs two of them to be bot operators, and
        # three, or check warns that an edited version could not be approved.
        "GATEHOUSE_TELEGRAM__OPERATORS": "111111111,222222222,333333333",
    }
    first = _gatehouse(env, "check")
    assert first.returncode == 1
    assert first.stdout.splitlines() == [
        "digest: dispatch webhook: environment variable DIGEST_WEBHOOK_TOKEN is not set",
        "digest: llm: no LLM provider configured (GATEHOUSE_LLM__*): "
        "the template drafter would run",
    ]
    env |= {
        "DIGEST_WEBHOOK_TOKEN": "t",
        "GATEHOUSE_LLM__KIND": "openai",
        "GATEHOUSE_LLM__BASE_URL": "http://127.0.0.1:9/v1",
        "GATEHOUSE_LLM__API_KEY": "k",
        "GATEHOUSE_LLM__MODEL": "fake-model",
        "GATEHOUSE_PRICES": json.dumps(
            {"fake-model": {"input_micros_per_mtok": 1, "output_micros_per_mtok": 1}}
        ),
    }
    second = _gatehouse(env, "check")
    assert second.returncode == 1
    assert "digest: llm: no budget" in second.stdout
    assert _gatehouse(env, "init").returncode == 0
    assert _gatehouse(env, "set-budget", "digest", "day", "5").returncode == 0
    third = _gatehouse(env, "check")
    assert third.returncode == 0, third.stdout
    assert third.stdout.strip() == "ok: 2 pipeline(s): digest, news"


@pytest.fixture
def mailbox() -> Iterator[dovecot.Dovecot]:
    if reason := dovecot.skip_reason():
        pytest.skip(reason)
    with dovecot.running() as running:
        yield running


async def test_online_asks_every_service_and_sends_nothing(
    tmp_path: Path, mailbox: dovecot.Dovecot
) -> None:
    with (
        localapi.LocalBotApi(token=TOKEN) as api,
        FakeLLM(api_key="right-key") as llm,
        WebhookServer() as hook,
        smtp_server.running() as (mail, smtp),
    ):
        mail_yaml = f"""
name: mail
schedule: manual
sources:
  - {{type: imap, host: {mailbox.host}, port: {mailbox.port}, ssl: false,
      username: {mailbox.user}, password: "env:MAIL_PASS"}}
dispatch:
  {{type: smtp, host: 127.0.0.1, port: {smtp.port}, starttls: false,
    username: {smtp_server.USERNAME}, password_env: SMTP_PASS, from_addr: bot@example.org}}
"""
        found = _load(
            tmp_path, mail=mail_yaml, hook=HOOK_PIPELINE.format(url=hook.url), writer=LLM_PIPELINE
        )

        async def ask(token: str, key: str, mail_pass: str, smtp_pass: str) -> list[str]:
            needs = preflight.Needs(
                llm=_llm(llm.base_url, key),
                prices=PRICES,
                budget_scopes=frozenset({"global"}),
                telegram_base_url=api.base_url,
                telegram_token=SecretStr(token),
                env={"MAIL_PASS": mail_pass, "SMTP_PASS": smtp_pass, "HOOK_TOKEN": "t"},
            )
            async with httpx.AsyncClient() as client:
                answers = await preflight.online(found, needs, client)
            return sorted(f"{'ok' if a.ok else 'FAILED'} {a}" for a in answers)

        port = f"127.0.0.1:{smtp.port}"
        good = await ask(TOKEN, "right-key", mailbox.password, smtp_server.PASSWORD)
        imap_where = f"{mailbox.user}@{mailbox.host}"
        assert good == sorted(
            [
                f"ok llm: key accepted by {llm.base_url}",
                "ok telegram: token accepted: the bot is @" + _bot_username(api),
                f"ok mail: source imap imap:{imap_where}/INBOX: login accepted for {imap_where}",
                f"ok mail: dispatch smtp: login accepted at {port}",
                "ok hook: dispatch webhook: 127.0.0.1 answered HEAD with HTTP 501",
            ]
        )
        bad = await ask("4242:wrong", "wrong-key", "wrong-pass", "wrong-pass")
        assert [line for line in bad if line.startswith("FAILED")] == sorted(
            [
                "FAILED llm: the API key was rejected (HTTP 401)",
                "FAILED telegram: the bot token was rejected",
                f"FAILED mail: source imap imap:{imap_where}/INBOX: login refused for {imap_where}",
                f"FAILED mail: dispatch smtp: {port} refused the login (535)",
            ]
        )
        assert not any("wrong" in line for line in bad)  # no secret echoed
        # Nothing was sent to anyone: no message, no provider call, no mail, no POST.
        assert api.sent() == []
        assert llm.calls == 0
        assert mail.envelopes == []
        assert hook.requests == []


def _bot_username(api: localapi.LocalBotApi) -> str:
    me = httpx.get(f"{api.base_url}{TOKEN}/getMe", timeout=5).json()
    return str(me["result"]["username"])


def test_check_online_from_the_cli(tmp_path: Path) -> None:
    with localapi.LocalBotApi(token=TOKEN) as api, FakeLLM(api_key="right-key") as llm:
        _load(tmp_path, writer=LLM_PIPELINE)
        env = {
            "GATEHOUSE_DATA_DIR": str(tmp_path / "data"),
            "GATEHOUSE_PIPELINES_DIR": str(tmp_path / "pipelines"),
            "GATEHOUSE_TELEGRAM__TOKEN": TOKEN,
            "GATEHOUSE_TELEGRAM__OPERATORS": "1001",
            "GATEHOUSE_TELEGRAM__BASE_URL": api.base_url,
            "GATEHOUSE_LLM__KIND": "openai",
            "GATEHOUSE_LLM__BASE_URL": llm.base_url,
            "GATEHOUSE_LLM__API_KEY": "wrong-key",
            "GATEHOUSE_LLM__MODEL": "fake-model",
            "GATEHOUSE_PRICES": json.dumps(
                {"fake-model": {"input_micros_per_mtok": 1, "output_micros_per_mtok": 1}}
            ),
        }
        assert _gatehouse(env, "init").returncode == 0
        assert _gatehouse(env, "set-budget", "global", "month", "5").returncode == 0
        done = _gatehouse(env, "check", "--online")
        username = _bot_username(api)
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        f"ok  telegram: token accepted: the bot is @{username}",
        "FAILED  llm: the API key was rejected (HTTP 401)",
    ]
    assert TOKEN not in done.stdout + done.stderr
    assert "wrong-key" not in done.stdout + done.stderr
