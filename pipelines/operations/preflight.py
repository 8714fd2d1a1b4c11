"""What each pipeline will need when it runs, checked before it goes live.

    problems = preflight.offline(pipelines, needs)           # settings and files only
    findings = await preflight.online(pipelines, needs, client)   # asks each service

Offline: every `env:` secret is set, an llm pipeline has a provider, a price and a
budget, a dispatch target has what it needs. Online: the bot token (getMe), the LLM
key (a models listing), IMAP and SMTP logins, and whether a webhook's host answers
(a HEAD request). Online checks send nothing to anyone: no message, no mail, no POST.
Secrets are read to log in and never appear in a finding.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import aioimaplib
import aiosmtplib
import httpx
from pydantic import BaseModel, SecretStr

from pipelines import dispatch
from pipelines.config import spec, triage
from pipelines.drafting import choice
from pipelines.ground import httpclient
from pipelines.providers import client as providers
from pipelines.sources import imap
from store.ledger import prices as ledger_prices

#: Seconds each online check may take before it counts as unreachable.
ONLINE_TIMEOUT_S = 10.0
_ENV_REF = "env:"
_ENV_FIELD = re.compile(r"^[a-z_]+_env$")


@dataclass(frozen=True)
class Needs:
    """What the running bot would have: its settings and the budgets in the store."""

    llm: providers.ProviderSettings | None
    prices: ledger_prices.PriceTable
    #: Scopes ("global" or a pipeline name) with at least one budget limit set.
    budget_scopes: frozenset[str]
    telegram_base_url: str = ""
    telegram_token: SecretStr | None = None
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)


@dataclass(frozen=True)
class Finding:
    """One thing checked: where, whether it is fine, and what was found or answered."""

    pipeline: str  # "" for the bot's own settings
    part: str
    ok: bool
    detail: str

    def __str__(self) -> str:
        where = f"{self.pipeline}: {self.part}" if self.pipeline else self.part
        return f"{where}: {self.detail}"


def offline(pipelines: Mapping[str, spec.Pipeline], needs: Needs) -> list[Finding]:
    """Problems that would make a pipeline fail or fall back later; empty when none."""
    found: list[Finding] = []
    for name, pipeline in sorted(pipelines.items()):
        for part, model in _parts(pipeline):
            for variable in sorted(_env_refs(model)):
                if not needs.env.get(variable):
                    detail = f"environment variable {variable} is not set"
                    found.append(Finding(name, part, False, detail))
        if pipeline.draft.drafter == "llm":
            found += _llm_problems(pipeline, needs)
        if pipeline.triage is not None:
            found += _triage_problems(pipeline, pipeline.triage, needs)
    return found


def _triage_problems(
    pipeline: spec.Pipeline, block: triage.TriageConfig, needs: Needs
) -> list[Finding]:
    """A triage that could never run: every entry would go on as on_failure says."""
    why = choice.triage_reason(block, needs.llm, needs.prices)
    if why is None and not needs.budget_scopes & {"global", pipeline.name}:
        why = f"no budget (set one with `gatehouse set-budget {pipeline.name} day 5`)"
    if why is None:
        return []
    detail = f"{why}: triage cannot run, so each entry goes on as on_failure: {block.on_failure}"
    return [Finding(pipeline.name, "triage", False, detail)]


def _parts(pipeline: spec.Pipeline) -> Iterator[tuple[str, BaseModel]]:
    for source in pipeline.sources:
        yield f"source {source.type} {source.scope}", source
    yield f"dispatch {pipeline.dispatch.type}", pipeline.dispatch


def _env_refs(value: Any, key: str = "") -> Iterator[str]:
    """Names of the environment variables a config model reads: `env:NAME` values and
    `*_env` fields, at any depth."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _env_refs(getattr(value, name), name)
    elif isinstance(value, Mapping):
        for name, item in value.items():
            yield from _env_refs(item, str(name))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _env_refs(item, key)
    else:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if isinstance(text, str) and text.startswith(_ENV_REF):
            yield text.removeprefix(_ENV_REF)
        elif isinstance(text, str) and _ENV_FIELD.match(key):
            yield text


def _llm_problems(pipeline: spec.Pipeline, needs: Needs) -> list[Finding]:
    why = choice.fallback_reason(pipeline, needs.llm, needs.prices)
    if why is not None:
        return [Finding(pipeline.name, "llm", False, f"{why}: the template drafter would run")]
    if not needs.budget_scopes & {"global", pipeline.name}:
        detail = (
            "no budget: the template drafter would run; set one with "
            f"`gatehouse set-budget {pipeline.name} day 5` (or scope global)"
        )
        return [Finding(pipeline.name, "llm", False, detail)]
    return []


async def online(
    pipelines: Mapping[str, spec.Pipeline], needs: Needs, client: httpx.AsyncClient
) -> list[Finding]:
    """Ask each outside service the pipelines and the bot need whether it would answer."""
    checks: list[Awaitable[Finding]] = []
    if needs.telegram_token is not None:
        checks.append(_telegram(needs, client))
    if needs.llm is not None and any(p.draft.drafter == "llm" for p in pipelines.values()):
        checks.append(_llm(needs.llm, client))
    for name, pipeline in sorted(pipelines.items()):
        for source in pipeline.sources:
            if isinstance(source, imap.Config):
                checks.append(_imap(name, source, needs.env))
        target = pipeline.dispatch
        if isinstance(target, dispatch.SmtpTarget):
            checks.append(_smtp(name, target, needs.env))
        elif isinstance(target, dispatch.WebhookTarget):
            checks.append(_webhook(name, target, client))
    return list(await asyncio.gather(*checks))


async def _telegram(needs: Needs, client: httpx.AsyncClient) -> Finding:
    assert needs.telegram_token is not None
    url = needs.telegram_base_url + needs.telegram_token.get_secret_value() + "/getMe"
    try:
        answer = await client.get(url, timeout=ONLINE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Finding("", "telegram", False, f"unreachable: {httpclient.why_unreachable(exc)}")
    if answer.status_code in (401, 404):
        return Finding("", "telegram", False, "the bot token was rejected")
    if answer.status_code != 200:
        return Finding("", "telegram", False, f"getMe answered HTTP {answer.status_code}")
    username = answer.json().get("result", {}).get("username", "?")
    return Finding("", "telegram", True, f"token accepted: the bot is @{username}")


async def _llm(llm: providers.ProviderSettings, client: httpx.AsyncClient) -> Finding:
    key = llm.api_key.get_secret_value()
    # Listing models costs nothing and needs the same key as a call.
    if llm.kind == "anthropic":
        url = f"{llm.base_url}/v1/models"
        headers = {"x-api-key": key, "anthropic-version": llm.anthropic_version}
    else:
        url = f"{llm.base_url}/models"
        headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        answer = await client.get(url, headers=headers, timeout=ONLINE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Finding(
            "", "llm", False, f"{llm.base_url} unreachable: {httpclient.why_unreachable(exc)}"
        )
    if answer.status_code in (401, 403):
        return Finding("", "llm", False, f"the API key was rejected (HTTP {answer.status_code})")
    if answer.status_code != 200:
        return Finding("", "llm", False, f"the models listing answered HTTP {answer.status_code}")
    return Finding("", "llm", True, f"key accepted by {llm.base_url}")


async def _imap(pipeline: str, source: imap.Config, env: Mapping[str, str]) -> Finding:
    part, where = f"source imap {source.scope}", f"{source.username}@{source.host}"
    password = _secret(source.password.get_secret_value(), env)
    if password is None:
        return Finding(pipeline, part, False, "the password's environment variable is not set")
    client = (aioimaplib.IMAP4_SSL if source.ssl else aioimaplib.IMAP4)(
        host=source.host, port=source.port, timeout=ONLINE_TIMEOUT_S
    )
    try:
        await client.wait_hello_from_server()
        ok = (await client.login(source.username, password)).result == "OK"
    except Exception as exc:
        # aioimaplib raises loosely typed errors; it scrubs the password from them.
        detail = f"{where}:{source.port} unreachable: {type(exc).__name__}"
        return Finding(pipeline, part, False, detail)
    finally:
        await imap._close(client)  # logs out and always drops the connection
    detail = f"login accepted for {where}" if ok else f"login refused for {where}"
    return Finding(pipeline, part, ok, detail)


async def _smtp(pipeline: str, target: dispatch.SmtpTarget, env: Mapping[str, str]) -> Finding:
    part, where = "dispatch smtp", f"{target.host}:{target.port}"
    smtp = aiosmtplib.SMTP(
        hostname=target.host, port=target.port, start_tls=target.starttls, timeout=ONLINE_TIMEOUT_S
    )
    try:
        await smtp.connect()
        if target.username is not None and target.password_env is not None:
            password = env.get(target.password_env)
            if not password:
                return Finding(pipeline, part, False, f"{target.password_env} is not set")
            await smtp.login(target.username, password)
        await smtp.quit()
    except aiosmtplib.SMTPAuthenticationError as exc:
        return Finding(pipeline, part, False, f"{where} refused the login ({exc.code})")
    except (aiosmtplib.SMTPException, OSError) as exc:
        why = httpclient.why_unreachable(exc)
        return Finding(pipeline, part, False, f"{where} unreachable: {why}")
    finally:
        smtp.close()
    what = "login accepted" if target.username else "server answered"
    return Finding(pipeline, part, True, f"{what} at {where}")


async def _webhook(
    pipeline: str, target: dispatch.WebhookTarget, client: httpx.AsyncClient
) -> Finding:
    try:
        answer = await client.head(target.url, timeout=ONLINE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Finding(
            pipeline, "dispatch webhook", False, f"unreachable: {httpclient.why_unreachable(exc)}"
        )
    # Any HTTP answer means the host is there; HEAD is never a delivery.
    detail = f"{httpx.URL(target.url).host} answered HEAD with HTTP {answer.status_code}"
    return Finding(pipeline, "dispatch webhook", True, detail)


def _secret(value: str, env: Mapping[str, str]) -> str | None:
    if value.startswith(_ENV_REF):
        return env.get(value.removeprefix(_ENV_REF)) or None
    return value
