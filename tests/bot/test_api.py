"""The HTTP trigger over a real socket, in front of a real runtime and store: auth,
idempotency, refusals, and the answers against the served OpenAPI description."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from bot.web import api, listen
from pipelines.service import runtime as runtime_mod
from store import db, items
from store.intake import timetable, tokens

PIPELINE = """\
name: news
schedule: manual
sources:
  - type: folder
    path: {inbox}
dispatch:
  type: none
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


DEFAULT = "<the fixture's token>"


class Api:
    def __init__(self, runtime: runtime_mod.Runtime, base: str, token: str) -> None:
        self.runtime = runtime
        self.base = base
        self.token = token

    async def post(
        self,
        path: str,
        body: Any = None,
        *,
        token: str | None = DEFAULT,
        key: str | None = None,
        headers: dict[str, str] | None = None,
        content: bytes | None = None,
    ) -> httpx.Response:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {self.token if token is DEFAULT else token}"
        if key is not None:
            sent["Idempotency-Key"] = key
        async with httpx.AsyncClient(base_url=self.base, timeout=10) as client:
            if content is not None:
                return await client.post(path, content=content, headers=sent)
            return await client.post(path, json=body, headers=sent)


#: Requests a token may make a minute in these tests, unless a test asks for fewer.
PER_MINUTE = 600


@pytest.fixture
async def trigger(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Api]:
    per_minute = getattr(request, "param", PER_MINUTE)
    (tmp_path / "inbox").mkdir()
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "news.yaml").write_text(PIPELINE.format(inbox=tmp_path / "inbox"))
    address = f"127.0.0.1:{free_port()}"
    cfg = runtime_mod.RuntimeConfig(
        store=db.StoreConfig(data_dir=tmp_path / "data"),
        pipelines_dir=tmp_path / "pipelines",
        workers=(api.worker(address, per_minute),),
    )
    runtime = await runtime_mod.Runtime.start(cfg)
    secret = tokens.new_token()
    await tokens.create(runtime.store, "ci", tokens.digest(secret), "cli", runtime.now())
    base = f"http://{address}"
    async with httpx.AsyncClient() as client:  # the worker binds on its first turn
        for _ in range(200):
            try:
                await client.get(base + "/v1/openapi.json")
                break
            except httpx.ConnectError:
                await asyncio.sleep(0.02)
    try:
        yield Api(runtime, base, secret)
    finally:
        await runtime.stop()


JSON = {"Content-Type": "application/json"}
ITEM = {
    "id": "ext-1",
    "title": "Bridge reopens",
    "text": "After repairs.",
    "link": "https://x.org/1",
}


async def item_rows(runtime: runtime_mod.Runtime) -> list[items.Item]:
    found = []
    for state in items.State:
        found += await items.in_state(runtime.store, state, "news")
    return found


async def test_missing_wrong_and_revoked_tokens_are_refused(trigger: Api) -> None:
    missing = await trigger.post("/v1/pipelines/news/items", ITEM, token=None)
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
    assert "Authorization: Bearer" in missing.json()["error"]
    wrong = await trigger.post("/v1/pipelines/news/items", ITEM, token=tokens.new_token())
    assert wrong.status_code == 401 and wrong.json() == {"error": "unknown or revoked token"}
    basic = await trigger.post(
        "/v1/pipelines/news/runs", token=None, headers={"Authorization": "Basic eDp5"}
    )
    assert basic.status_code == 401
    assert await item_rows(trigger.runtime) == []

    assert (await trigger.post("/v1/pipelines/news/runs")).status_code == 202
    await tokens.revoke(trigger.runtime.store, "ci", "cli", trigger.runtime.now())
    revoked = await trigger.post("/v1/pipelines/news/items", ITEM)
    assert revoked.status_code == 401 and revoked.json() == {"error": "unknown or revoked token"}
    assert await item_rows(trigger.runtime) == []


async def test_an_item_is_recorded_once_and_a_retry_gets_the_first_answer(trigger: Api) -> None:
    first = await trigger.post("/v1/pipelines/news/items", ITEM, key="k-1")
    assert first.status_code == 202
    body = first.json()
    assert body["duplicate"] is False and body["pipeline"] == "news" and body["id"] == "ext-1"
    again = await trigger.post("/v1/pipelines/news/items", ITEM, key="k-1")
    assert (again.status_code, again.json()) == (202, body)
    recorded = await item_rows(trigger.runtime)
    assert [(i.id, i.source_id, i.scope) for i in recorded] == [(body["item"], "ext-1", "api")]
    assert recorded[0].payload["extra"] == {"via": "api", "caller": "ci"}
    # Asked for a run that drafts it (the scheduler clears the request as the run starts).
    state = (await timetable.all_states(trigger.runtime.store))["news"]
    assert state.run_requested_at is not None or state.last_started_at is not None

    # The same id under a new key: dedup has seen it, nothing new is recorded.
    duplicate = await trigger.post("/v1/pipelines/news/items", ITEM, key="k-2")
    assert duplicate.status_code == 200
    assert duplicate.json() == {"pipeline": "news", "id": "ext-1", "item": None, "duplicate": True}
    assert len(await item_rows(trigger.runtime)) == 1


@pytest.mark.parametrize("trigger", [3], indirect=True)
async def test_a_token_past_its_rate_gets_429_and_other_tokens_go_on(trigger: Api) -> None:
    sent = [{**ITEM, "id": f"ext-{n}"} for n in range(4)]
    answers = [await trigger.post("/v1/pipelines/news/items", body) for body in sent]
    assert [a.status_code for a in answers] == [202, 202, 202, 429]
    refused = answers[-1]
    assert refused.headers["Retry-After"] == "20"
    assert "'ci' may make 3 requests a minute" in refused.json()["error"]
    recorded = sorted(i.source_id for i in await item_rows(trigger.runtime))
    assert recorded == ["ext-0", "ext-1", "ext-2"]  # the refused one recorded nothing
    other = tokens.new_token()
    rt = trigger.runtime
    await tokens.create(rt.store, "cron", tokens.digest(other), "cli", rt.now())
    assert (await trigger.post("/v1/pipelines/news/runs", token=other)).status_code == 202


async def test_a_reused_key_with_another_body_is_409_and_changes_nothing(trigger: Api) -> None:
    assert (await trigger.post("/v1/pipelines/news/items", ITEM, key="k")).status_code == 202
    other = {**ITEM, "id": "ext-2"}
    conflict = await trigger.post("/v1/pipelines/news/items", other, key="k")
    assert conflict.status_code == 409 and "different request" in conflict.json()["error"]
    # The same key on the other endpoint is another request too.
    assert (await trigger.post("/v1/pipelines/news/runs", key="k")).status_code == 409
    assert [i.source_id for i in await item_rows(trigger.runtime)] == ["ext-1"]


async def test_a_run_request_is_idempotent(trigger: Api) -> None:
    first = await trigger.post("/v1/pipelines/news/runs", key="r-1")
    assert first.status_code == 202 and first.json()["run"] == "requested"
    again = await trigger.post("/v1/pipelines/news/runs", key="r-1")
    assert again.json() == first.json()
    unknown = await trigger.post("/v1/pipelines/nope/runs")
    assert unknown.status_code == 404 and "known: news" in unknown.json()["error"]


@pytest.mark.parametrize(
    ("content", "headers", "status", "words"),
    [
        (b"{not json", JSON, 400, "not valid JSON"),
        (b"[1, 2]", JSON, 422, "must be a JSON object"),
        (b"id=1", {"Content-Type": "application/x-www-form-urlencoded"}, 415, "application/json"),
        (json.dumps({"id": "x"}).encode(), JSON, 422, "title: "),
        (json.dumps({**ITEM, "extra": 1}).encode(), JSON, 422, "extra"),
        (json.dumps({**ITEM, "link": "ftp://x"}).encode(), JSON, 422, "link"),
        (json.dumps({**ITEM, "title": 7}).encode(), JSON, 422, "title"),
        (json.dumps({**ITEM, "text": "x" * 50_001}).encode(), JSON, 422, "text"),
        (b"[" * 200_000, JSON, 400, "not valid JSON"),
        (b"x" * (api.MAX_BODY_BYTES + 1), JSON, 413, "at most"),
    ],
)  # fmt: skip
async def test_bad_bodies_get_a_clear_4xx(
    trigger: Api, content: bytes, headers: dict[str, str], status: int, words: str
) -> None:
    answer = await trigger.post("/v1/pipelines/news/items", content=content, headers=headers)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"]
    assert await item_rows(trigger.runtime) == []


async def test_a_lone_surrogate_is_refused_before_the_store(trigger: Api) -> None:
    # A JSON escape can name half a surrogate pair, which SQLite cannot hold.
    body = b'{"id": "x\\ud800", "title": "T"}'
    answer = await trigger.post("/v1/pipelines/news/items", content=body, headers=JSON)
    assert answer.status_code == 422 and answer.json()["error"].startswith("id: ")
    assert await item_rows(trigger.runtime) == []


async def test_a_nul_in_an_id_is_refused_before_the_store(trigger: Api) -> None:
    # PostgreSQL's text cannot hold NUL; SQLite could, and the backends must agree.
    body = b'{"id": "x\\u0000", "title": "T"}'
    answer = await trigger.post("/v1/pipelines/news/items", content=body, headers=JSON)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"].startswith(
        "id: holds text the store cannot keep: a NUL character (U+0000) at character 1"
    )
    assert await item_rows(trigger.runtime) == []


async def test_bad_headers_are_refused(trigger: Api) -> None:
    bad_key = await trigger.post("/v1/pipelines/news/items", ITEM, key="a key with spaces")
    assert bad_key.status_code == 400 and "Idempotency-Key" in bad_key.json()["error"]
    many = {f"X-H{i}": "1" for i in range(listen.MAX_HEADERS + 1)}
    crowded = await trigger.post("/v1/pipelines/news/items", ITEM, headers=many)
    assert crowded.status_code == 431
    body_for_run = await trigger.post("/v1/pipelines/news/runs", {"when": "now"})
    assert body_for_run.status_code == 422 and "no fields" in body_for_run.json()["error"]
    assert await item_rows(trigger.runtime) == []


async def test_answers_match_the_served_openapi_description(trigger: Api) -> None:
    async with httpx.AsyncClient() as client:
        spec = (await client.get(trigger.base + "/v1/openapi.json")).json()
    assert spec["openapi"].startswith("3.1")
    assert set(spec["paths"]) == {
        "/v1/pipelines/{name}/runs", "/v1/pipelines/{name}/items", "/v1/openapi.json"
    }  # fmt: skip
    schemas = spec["components"]["schemas"]
    resolver = {"components": spec["components"]}

    def check(answer: httpx.Response, path: str) -> None:
        declared = spec["paths"][path]["post"]["responses"][str(answer.status_code)]
        declared = spec["components"]["responses"]["Refused"] if "$ref" in declared else declared
        schema = declared["content"]["application/json"]["schema"]
        jsonschema.validate(answer.json(), {**schema, **resolver})

    items_path, runs_path = "/v1/pipelines/{name}/items", "/v1/pipelines/{name}/runs"
    jsonschema.validate(ITEM, schemas["Item"])
    check(await trigger.post("/v1/pipelines/news/items", ITEM), items_path)
    check(await trigger.post("/v1/pipelines/news/items", ITEM), items_path)  # 200 duplicate
    check(await trigger.post("/v1/pipelines/news/items", {"id": ""}), items_path)  # 422
    check(await trigger.post("/v1/pipelines/news/items", ITEM, token=None), items_path)  # 401
    check(await trigger.post("/v1/pipelines/news/runs"), runs_path)  # 202
    check(await trigger.post("/v1/pipelines/nope/runs"), runs_path)  # 404
    async with httpx.AsyncClient() as client:
        lost = await client.get(trigger.base + "/v2/anything")
    assert lost.status_code == 404 and "openapi.json" in lost.json()["error"]


async def test_wrong_methods_and_long_names_get_short_json_answers(trigger: Api) -> None:
    headers = {"Authorization": f"Bearer {trigger.token}"}
    async with httpx.AsyncClient(base_url=trigger.base, headers=headers) as client:
        wrong = await client.get("/v1/pipelines/news/runs")
        long_name = await client.post("/v1/pipelines/" + "n" * 5000 + "/runs")
    assert (wrong.status_code, wrong.json()) == (405, {"error": "Method Not Allowed"})
    assert long_name.status_code == 404 and len(long_name.json()["error"]) < 200
