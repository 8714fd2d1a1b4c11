"""The offline demo in-process, driven through its web page's own HTTP API: a card for
every entry of the bundled feed, Approve edits the card in place, /status answers."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.chat import card_text
from bot.demo import run as demo

ROOT = Path(__file__).resolve().parents[2]
#: Seconds to wait for the bot to act: generous, only a hung demo takes this long.
PATIENCE = 30.0


async def start_demo(
    options: demo.Options,
) -> tuple[demo.Running, asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    ready: asyncio.Future[demo.Running] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(demo.run(options, stop, ready.set_result))
    either: set[asyncio.Future[Any]] = {task, ready}
    await asyncio.wait(either, timeout=PATIENCE, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raises what stopped the demo before it was ready
    return ready.result(), stop, task


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[demo.Running]:
    running, stop, task = await start_demo(demo.Options(data_dir=tmp_path / "data", port=0))
    try:
        yield running
    finally:
        stop.set()
        await task


class Page:
    """What the page's script does: read the chat, long-poll for changes, tap, send."""

    def __init__(self, client: httpx.AsyncClient, params: dict[str, str] | None = None) -> None:
        self.client = client
        #: Which chat the page shows: as whom, and whether the team room (room=1).
        self.params = params or {}

    async def chat(self) -> dict[str, Any]:
        response = await self.client.get("/api/chat", params=self.params)
        response.raise_for_status()
        return dict(response.json())

    async def until(self, found: Callable[[dict[str, Any]], Any]) -> Any:
        """Follow the chat as the page does until `found(chat)` is truthy; return it."""
        async with asyncio.timeout(PATIENCE):
            while True:
                state = await self.chat()
                result = found(state)
                if result:
                    return result
                wait = await self.client.get(
                    "/api/wait", params={"after": state["revision"], "timeout": 5}
                )
                wait.raise_for_status()

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.client.post(path, json=body)
        assert response.status_code == 200, response.text
        return dict(response.json())


@pytest.fixture
async def page(running: demo.Running) -> AsyncIterator[Page]:
    async with httpx.AsyncClient(base_url=running.url, timeout=PATIENCE) as client:
        yield Page(client)


def feed_titles() -> list[str]:
    titles = re.findall(r"<item>\s*<title>(.*?)</title>", demo.FEED.read_text())
    return [t.replace("&amp;", "&") for t in titles]


def cards(state: dict[str, Any], pipeline: str = "news") -> list[dict[str, Any]]:
    return [
        m for m in state["messages"] if m["from_bot"] and m["text"].startswith(f"📝 {pipeline} ·")
    ]


def pointing(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The cards edited to point to a copy sent again below them."""
    return [m for m in cards(state) if m["text"].endswith(card_text.SENT_AGAIN)]


def button(card: dict[str, Any], label: str) -> str:
    for row in (card["reply_markup"] or {}).get("inline_keyboard", []):
        for key in row:
            if label in key["text"]:
                return str(key["callback_data"])
    raise AssertionError(f"no {label} button under {card['text'][:60]!r}")


async def test_a_card_for_each_feed_entry_and_approve_edits_it(
    page: Page, running: demo.Running
) -> None:
    titles = feed_titles()
    assert len(titles) == 5
    every = await page.until(lambda s: cards(s) if len(cards(s)) == len(titles) else None)
    for title in titles:
        assert sum(title in card["text"] for card in every) == 1, title
    # Formatting travels as Telegram entities: the pipeline name is bold, the title a link.
    first = every[0]
    assert {e["type"] for e in first["entities"]} >= {"bold", "text_link"}

    tapped = await page.post(
        "/api/tap", {"message_id": first["message_id"], "data": button(first, "Approve")}
    )

    def approved(state: dict[str, Any]) -> Any:
        same = [m for m in state["messages"] if m["message_id"] == first["message_id"]]
        return same[0] if same and "approved by" in same[0]["text"] else None

    edited = await page.until(approved)
    assert edited["version"] > first["version"]  # edited in place, not a new message
    assert "approved by Alex (@alex)" in edited["text"]
    # Only Undo is left on a decided card, until the dispatch goes (the undo window).
    assert "Undo until" in edited["text"]
    assert [b["text"] for b in edited["reply_markup"]["inline_keyboard"][0]] == ["↩️ Undo"]
    answers = (await page.chat())["answers"]
    assert answers[tapped["query_id"]] == "✅ approved"
    # The approved draft is dispatched: a markdown file in the demo's data directory.
    written = await page.until(lambda _: list((running.out_dir / "news").glob("news-*-v*.md")))
    [title] = [t for t in titles if t in first["text"]]  # drafts finish in any order
    assert len(written) == 1 and title in written[0].read_text()
    assert running.out_dir.is_relative_to(running.data_dir)
    # The card then says where the post went.
    dispatched = await page.until(lambda s: _message(s, first["message_id"], "📤 sent"))
    assert "approved by Alex (@alex)" in dispatched["text"]
    assert f"📤 sent: wrote {written[0]}" in dispatched["text"]


def _message(state: dict[str, Any], message_id: int, text: str) -> dict[str, Any] | None:
    """The message with this id, once its text holds `text`."""
    found = [m for m in state["messages"] if m["message_id"] == message_id]
    return found[0] if found and text in found[0]["text"] else None


def _reply_to(before: int, text: str) -> Callable[[dict[str, Any]], Any]:
    """A `Page.until` test: the bot's first message after `before` messages holding `text`."""

    def found(state: dict[str, Any]) -> Any:
        later = state["messages"][before:]
        return next((m for m in later if m["from_bot"] and text in m["text"]), None)

    return found


async def test_llm_drafts_cost_money_and_the_budget_says_so(page: Page) -> None:
    """The demo's LLM has a price: each news card shows a cost, the day's budget passes
    50 % (an alert), and /budget shows the spend with its bar."""
    every = await page.until(lambda s: cards(s) if len(cards(s)) == 5 else None)
    for card in every:
        assert re.search(r"drafter llm · cost \$0\.0\d*[1-9]", card["text"]), card["text"]
    alert = await page.until(_reply_to(0, "50% reached"))
    assert alert["text"].startswith("⚠️ Budget global/day")
    before = len((await page.chat())["messages"])
    await page.post("/api/send", {"text": "/budget"})
    reply = await page.until(_reply_to(before, "budgets"))
    line = re.search(r"global ([▓░]+) (\d+)% of \$0\.10 today\s+\$(\S+) spent", reply["text"])
    assert line is not None, reply["text"]
    bar, used, spent = line.groups()
    assert int(used) >= 50 and float(spent) > 0.05
    assert bar.count("▓") >= 3  # the bar: more than half of it spent


async def test_the_wire_is_filtered_and_triaged_and_skipped_news_lists_it(page: Page) -> None:
    """The news pipeline's wire: its two sponsored entries filtered, its three others
    skipped by the priced triage with the model's reason; /skipped news lists them at
    once and /stats counts them beside the five cards."""
    await page.until(lambda s: cards(s) if len(cards(s)) == 5 else None)
    for _ in range(60):  # a bound, not a speed: the wire's triage ends beside the cards
        before = len((await page.chat())["messages"])
        await page.post("/api/send", {"text": "/skipped news"})
        listing = await page.until(_reply_to(before, "skipped"))
        if "3 skipped" in listing["text"]:
            break
        await asyncio.sleep(0.5)
    assert "3 skipped, newest first" in listing["text"], listing["text"]
    for title in ("National lottery", "Celebrity chef", "Heatwave"):
        assert title in listing["text"]
    assert listing["text"].count("triage 0.10: national news with nothing local in it") == 3
    before = len((await page.chat())["messages"])
    await page.post("/api/send", {"text": "/stats news"})
    numbers = await page.until(_reply_to(before, "last 7 days"))
    assert "entries 10 · filtered 2 · skipped 3 · carded 5" in numbers["text"], numbers["text"]


async def test_the_team_room_holds_one_card_that_two_operators_vote_on(page: Page) -> None:
    """A quorum of two in a forum group: the one card shows the first vote and who is
    awaited, a second operator (the page speaks as them with `as`) completes it from the
    same card, and the post is dispatched; no team card went to a private chat."""
    alex, sam, kim = demo.content.OPERATORS
    room = Page(page.client, {"room": "1"})
    [card] = await room.until(lambda s: cards(s, "team"))
    assert card["message_thread_id"] is not None  # in the team room's topic
    body = {"message_id": card["message_id"], "data": button(card, "Approve"), "room": True}
    await page.post("/api/tap", body)
    awaited = "✅ Alex (@alex) · waiting for 1 more of Sam (@sam), Kim (@kim)"
    await room.until(lambda s: _message(s, card["message_id"], awaited))
    assert (await page.chat())["operators"] == [alex, sam, kim]

    as_sam = Page(page.client, {"room": "1", "as": str(sam)})
    [theirs] = cards(await as_sam.chat(), "team")
    assert theirs["message_id"] == card["message_id"]  # the same card, seen by all
    await page.post("/api/tap", {**body, "data": button(theirs, "Approve"), "as": sam})
    done = await room.until(lambda s: _message(s, card["message_id"], "📤 sent"))
    assert "approved by Alex (@alex), Sam (@sam)" in done["text"]
    for operator in (alex, sam, kim):
        private = Page(page.client, {"as": str(operator)})
        assert cards(await private.chat(), "team") == []
    stranger = await page.client.get("/api/chat", params={"as": 4242})
    assert stranger.status_code == 400 and "1001, 1002, 1003" in stranger.json()["error"]


async def test_a_team_card_one_operator_edited_is_approved_by_the_other_two(page: Page) -> None:
    """Four eyes in the team room: Alex edits, may not approve his own version, and the
    new card never waits for him; Sam and Kim approve it and it is sent."""
    _, sam, kim = demo.content.OPERATORS
    room = Page(page.client, {"room": "1"})
    [card] = await room.until(lambda s: cards(s, "team"))
    await page.post(
        "/api/tap", {"message_id": card["message_id"], "data": button(card, "Edit"), "room": True}
    )
    asked = await room.until(_reply_to(0, "tap the draft to copy it"))
    words = "Release notes, as Alex would put them"
    sent = {"text": words, "reply_to_message_id": asked["message_id"], "room": True}
    await page.post("/api/send", sent)
    [mine] = await room.until(lambda s: [c for c in cards(s, "team") if words in c["text"]])
    assert "version 2" in mine["text"] and "needs 2 approvals" not in mine["text"]
    tap = {"message_id": mine["message_id"], "data": button(mine, "Approve"), "room": True}
    refused = await page.post("/api/tap", tap)
    answer = await room.until(lambda s: s["answers"].get(refused["query_id"]))
    assert answer.startswith("you wrote version 2 of item")

    await page.post("/api/tap", {**tap, "as": sam})
    voted = await room.until(lambda s: _message(s, mine["message_id"], "✅ Sam (@sam) · "))
    assert "waiting for Kim (@kim)" in voted["text"] and "Alex" not in voted["text"].split("✅")[-1]
    await page.post("/api/tap", {**tap, "as": kim})
    done = await room.until(lambda s: _message(s, mine["message_id"], "📤 sent"))
    assert "approved by Sam (@sam), Kim (@kim)" in done["text"]


async def test_a_restart_with_its_data_dir_shows_the_chat_and_sends_open_cards_again_below_old_ones(
    tmp_path: Path,
) -> None:
    options = demo.Options(data_dir=tmp_path / "data", port=0)
    running, stop, task = await start_demo(options)

    async with httpx.AsyncClient(base_url=running.url, timeout=PATIENCE) as client:
        before = await Page(client).until(lambda s: s if len(cards(s)) == 5 else None)
        team = await Page(client, {"room": "1"}).until(lambda s: cards(s, "team"))
    stop.set()
    await task
    open_items = {
        int(re.search(r"· item (\d+)", m["text"]).group(1))  # type: ignore[union-attr]
        for m in cards(before) + team
    }

    running, stop, task = await start_demo(options)
    try:
        # Both operators' chats come back; the urgent card too, unless its window passed.
        assert running.restored >= len(before["messages"])
        assert open_items <= set(running.resent)
        async with httpx.AsyncClient(base_url=running.url, timeout=PATIENCE) as client:
            page = Page(client)
            after = await page.until(lambda s: s if len(pointing(s)) == 5 else None)
            old, new = cards(after)[:5], cards(after)[5:]
            # The conversation so far, ids kept; each old card says it was sent again,
            # without buttons, and its new copy answers it (a quote that jumps to it).
            pointer = f"\n\n{card_text.SENT_AGAIN}"
            assert [m["text"] for m in old] == [m["text"] + pointer for m in cards(before)]
            assert [m["message_id"] for m in old] == [m["message_id"] for m in cards(before)]
            assert all(m["reply_markup"] is None for m in old)
            answered = {m["reply_to_message_id"]: m["text"] + pointer for m in new}
            assert answered == {m["message_id"]: m["text"] for m in old}
            card = new[0]
            await page.post(
                "/api/tap", {"message_id": card["message_id"], "data": button(card, "Approve")}
            )
            await page.until(lambda s: _message(s, card["message_id"], "approved by"))
    finally:
        stop.set()
        await task


async def test_status_answers(page: Page) -> None:
    await page.until(lambda s: s["commands"])  # the bot is up and has set its commands
    before = len((await page.chat())["messages"])
    await page.post("/api/send", {"text": "/status"})

    def status_reply(state: dict[str, Any]) -> Any:
        later = state["messages"][before:]
        return next(
            (m for m in later if m["from_bot"] and m["text"].startswith("gatehouse ·")), None
        )

    reply = await page.until(status_reply)
    assert all(name in reply["text"] for name in ("news", "team", "urgent"))
    mine = [m for m in (await page.chat())["messages"] if not m["from_bot"]]
    assert mine[-1]["text"] == "/status" and mine[-1]["sender"]["id"] == demo.OPERATOR


async def test_page_and_feed_are_served(page: Page) -> None:
    html = await page.client.get("/")
    assert html.status_code == 200 and "gatehouse demo" in html.text
    script = await page.client.get("/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    style = await page.client.get("/style.css")
    for asset in (html, script, style):
        assert not re.search(r"https?://", asset.text), "the page must fetch nothing from outside"
    assert "default-src 'self'" in html.headers["content-security-policy"]
    feed = await page.client.get(demo.FEED_PATH)
    # The bundled feed, its links pointing at the demo's own news site.
    local = str(page.client.base_url).rstrip("/") + "/gazette/"
    bundled = demo.FEED.read_text().replace("https://gazette.example.org/", local)
    assert feed.status_code == 200 and feed.text == bundled


async def test_bad_requests_say_what_is_wrong(page: Page) -> None:
    empty = await page.client.post("/api/send", json={"text": "  "})
    assert empty.status_code == 400 and "'text'" in empty.json()["error"]
    no_message = await page.client.post("/api/tap", json={"message_id": 99999, "data": "x"})
    assert no_message.status_code == 400 and "99999" in no_message.json()["error"]
    not_object = await page.client.post("/api/tap", json=[1])
    assert not_object.status_code == 400 and "JSON object" in not_object.json()["error"]
    # A form post (what another site's page could send without asking) is refused.
    form = await page.client.post("/api/send", data={"text": "/status"})
    assert form.status_code == 400 and "application/json" in form.json()["error"]
    unknown = await page.client.get("/api/nothing")
    assert unknown.status_code == 404


async def test_the_banners_cli_command_works_as_printed_from_anywhere(
    running: demo.Running,
) -> None:
    """Run from `/` with no gatehouse settings in the environment, it sees the demo's
    store and exactly its pipelines."""
    command = demo.cli_command(running, "status --json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}
    done = await asyncio.to_thread(
        subprocess.run,
        shlex.split(command),
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert [p["name"] for p in status["overview"]["pipelines"]] == ["news", "team", "urgent"]
    assert status["store"]["path"] == str(running.data_dir / "gatehouse.db")


async def test_every_command_the_banner_prints_exits_0_against_the_running_demo(
    running: demo.Running,
) -> None:
    """check names no missing token nor a missing LLM: demo.env holds the demo's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEHOUSE_")}

    async def run(command: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run, shlex.split(demo.cli_command(running, command)), cwd="/", env=env,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    for command in demo.BANNER_COMMANDS:
        done = await run(command)
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    # Drafting with the demo's priced LLM is set up too (the budget may refuse some).
    llm = await run("dry-run news --llm --limit 1")
    assert "no LLM provider configured" not in llm.stdout + llm.stderr
    assert llm.returncode in (0, 1), llm.stderr


async def test_without_a_data_dir_the_demo_removes_its_temporary_one() -> None:
    running, stop, task = await start_demo(demo.Options(port=0))
    assert running.temporary and (running.data_dir / "gatehouse.db").exists()
    stop.set()
    await task
    assert not running.data_dir.exists()


async def test_a_taken_port_is_refused_clearly(running: demo.Running, tmp_path: Path) -> None:
    options = demo.Options(data_dir=tmp_path / "other", port=running.web.port)
    with pytest.raises(demo.DemoError, match=r"choose another --port"):
        await start_demo(options)


def test_ctrl_c_stops_the_cli_cleanly(tmp_path: Path) -> None:
    """`gatehouse demo` prints the URL, and SIGINT ends it with exit code 0."""
    env = {**os.environ, "GATEHOUSE_TELEGRAM__TOKEN": "1:must-not-be-used"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "demo",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = None
        for line in proc.stdout:
            if line.strip().startswith("open"):
                url = line.split()[-1]
                break
        assert url is not None and url.startswith("http://127.0.0.1:")
        assert httpx.get(url + "api/chat", timeout=10).status_code == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "demo stopped" in out
    assert "Traceback" not in err


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_dev_py_stops_the_demo_with_no_orphan(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """`kill -INT` or `kill -TERM` sent to dev.py alone stops the demo it started."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "dev.py"),
            "demo",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children: list[int] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip().startswith("open"):
                break
        children = _children(proc.pid)
        assert len(children) == 1
        assert _alive(children[0])
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for child in children:
            if _alive(child):
                os.kill(child, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert "demo stopped" in out
    assert not _alive(children[0])
