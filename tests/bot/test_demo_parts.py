"""The demo's own parts alone: its LLM over a real socket, and the saved conversation."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot.demo import content, resume
from bot.demo import llm as demo_llm
from bot.demo.botapi import localapi
from pipelines.approval import quorum
from pipelines.config import spec
from pipelines.drafting import calls, prompt
from pipelines.sources import rss
from store.items import machine
from store.ledger import budgets, prices


@pytest.fixture
def llm() -> Iterator[demo_llm.DemoLLM]:
    with demo_llm.DemoLLM() as server:
        yield server


def ask(llm: demo_llm.DemoLLM, body: object, key: str = demo_llm.API_KEY) -> httpx.Response:
    return httpx.post(
        f"{llm.base_url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
    )


def test_the_demo_llm_writes_a_post_from_the_fenced_fields_and_reports_usage(
    llm: demo_llm.DemoLLM,
) -> None:
    text = "The bridge reopens on Monday. Traffic returns to two lanes. Buses follow later."
    content = f"Headline:\n{prompt.fence('Bridge reopens')}\n\nStory:\n{prompt.fence(text)}"
    body = {
        "model": "demo-model",
        "max_tokens": 80,
        "messages": [{"role": "user", "content": content}],
    }
    answer = ask(llm, body)
    assert answer.status_code == 200
    reply = answer.json()
    post = reply["choices"][0]["message"]["content"]
    assert post == f"Bridge reopens: {text}"
    assert reply["usage"]["completion_tokens"] == demo_llm.tokens(post)
    assert answer.headers["x-request-id"] == "req_fake_000001"
    # A model stops at max_tokens: the post is cut, and so is what it costs.
    short = ask(llm, {**body, "max_tokens": 3}).json()
    assert len(short["choices"][0]["message"]["content"]) == 12
    assert llm.calls == 2


def test_the_demo_llm_refuses_a_wrong_key_and_bad_requests(llm: demo_llm.DemoLLM) -> None:
    assert ask(llm, {"messages": []}, key="wrong").status_code == 401
    bad = httpx.post(
        f"{llm.base_url}/chat/completions",
        content=b"not json",
        headers={"Authorization": f"Bearer {demo_llm.API_KEY}"},
        timeout=10,
    )
    assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]
    elsewhere = httpx.post(f"{llm.base_url}/files", content=b"{}", timeout=10)
    assert elsewhere.status_code == 404
    models = httpx.get(
        f"{llm.base_url}/models", headers={"Authorization": f"Bearer {demo_llm.API_KEY}"}
    )
    assert models.json()["data"][0]["id"] == demo_llm.MODEL
    assert llm.calls == 0


def test_a_saved_chat_comes_back_with_its_ids_and_without_its_buttons(tmp_path: Path) -> None:
    keyboard = {"inline_keyboard": [[{"text": "Approve", "callback_data": "a"}]]}
    with localapi.LocalBotApi() as api:
        api.inject_command(1001, 1001, "/status")
        api.state.add_message(
            1001, from_bot=True, sender={"id": 1, "is_bot": True}, text="card",
            entities=[], reply_markup=keyboard, reply_to_message_id=None, now=1,
        )  # fmt: skip
        resume.save_chat(api, tmp_path)
    with localapi.LocalBotApi() as api:
        assert resume.restore_chat(api, tmp_path) == 2
        command, card = api.messages(1001)
        assert (command.text, card.text, card.message_id) == ("/status", "card", 2)
        assert card.reply_markup is None
        # Messages sent from now on are numbered after the restored ones.
        assert api.inject_message(1001, 1001, "hello")["message"]["message_id"] == 3


@pytest.mark.parametrize("saved", [b"{not json", b'{"messages": [{"chat_id": 1}]}', b"[]"])
def test_an_unreadable_saved_chat_is_skipped_and_logged(
    tmp_path: Path, saved: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / resume.CHAT_FILE).write_bytes(saved)
    with localapi.LocalBotApi() as api:
        assert resume.restore_chat(api, tmp_path) == 0
        assert api.messages(1001) == []
    assert "was not restored" in caplog.text


def test_no_saved_chat_is_a_first_run(tmp_path: Path) -> None:
    with localapi.LocalBotApi() as api:
        assert resume.restore_chat(api, tmp_path) == 0
    assert not (tmp_path / resume.CHAT_FILE).exists()


def test_the_demo_is_set_up_to_show_an_sla_warning_and_a_budget_alert_in_its_first_minute(
    tmp_path: Path,
) -> None:
    """What the first minute shows follows from the demo's settings, not from luck: the
    urgent window warns inside the minute with 30 s and more to act, and the news drafts' holds fit
    the budget side by side while their settled cost passes its first alert."""
    files = content.write(tmp_path, "http://127.0.0.1:1/")
    loaded = spec.load_dir(files.pipelines_dir, spec.LoadContext(frozenset(content.OPERATORS)))
    assert not loaded.errors, spec.format_errors(loaded.errors)
    window = loaded.pipelines["urgent"].approval.window
    warned = min(window * machine.WARN_AT, window - machine.WARN_LEAD).total_seconds()
    assert warned + content.SWEEP_EVERY_S < 60
    assert window.total_seconds() - warned - content.SWEEP_EVERY_S >= 30
    # Two of three: an edited note still has two who may approve it (four eyes).
    team = loaded.pipelines["team"].approval
    assert (team.quorum, len(team.approvers), len(content.OPERATORS)) == (2, 3, 3)
    assert quorum.after_any_edit(team) is None

    news = loaded.pipelines["news"]
    price = content.PRICES[demo_llm.MODEL]
    limit = int(float(content.BUDGET_USD) * 1_000_000)
    prompts = [prompt.render_prompt(news.draft.prompt_text or "", item) for item in _items()]
    assert len(prompts) == 5
    # Every draft holds its worst case at once (they are drafted side by side) ...
    worst = [
        prices.worst_case(price, calls.max_input_tokens(calls.SYSTEM, text), news.draft.max_tokens)
        for text in prompts
    ]
    assert sum(worst) <= limit
    # ... and settles at least what its post's tokens cost: together past the first alert.
    posts = [demo_llm.write_post(text)[: news.draft.max_tokens * 4] for text in prompts]
    spent = sum(prices.cost(prices.Usage(0, demo_llm.tokens(post)), price) for post in posts)
    assert spent * 100 >= limit * budgets.THRESHOLDS_PCT[0]


def _items() -> list[prompt.DraftItem]:
    """The bundled feed's items as the rss source reads them."""
    feed = content.FEEDS["/feeds/demo.xml"]
    fetched = rss._parse(str(feed), feed.read_bytes(), "application/rss+xml")
    return [prompt.DraftItem.from_fetched(item, "news") for item in fetched]


def test_the_demo_news_filter_drops_the_sponsored_and_its_triage_skips_the_wire(
    tmp_path: Path, llm: demo_llm.DemoLLM
) -> None:
    """The news pipeline's filter drops the wire's sponsored entries; the demo model,
    asked the triage question over a real socket, passes every Gazette story with a
    reason and skips the rest of the wire with one; its triage model has a price."""
    from pipelines.config import filters
    from pipelines.runs import intake

    files = content.write(tmp_path, "http://127.0.0.1:1/")
    loaded = spec.load_dir(files.pipelines_dir)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    news = loaded.pipelines["news"]
    assert news.triage is not None and news.triage.model in content.PRICES
    gazette, wire = (_fetched(path) for path in ("/feeds/demo.xml", "/feeds/wire.xml"))

    def dropped(item: rss.base.FetchedItem) -> bool:
        return filters.verdict(news.filter, intake._payload(item)).dropped

    kept = [item for item in wire if not dropped(item)]
    assert len(kept) == 3 and all("Sponsored" not in item.title for item in kept)
    assert not any(dropped(item) for item in gazette)

    def verdict(item: rss.base.FetchedItem) -> dict[str, object]:
        question = prompt.render_prompt(
            news.triage.template(),  # type: ignore[union-attr]
            prompt.DraftItem.from_fetched(item, "news"),
        )
        body = {"model": content.TRIAGE_MODEL, "messages": [{"role": "user", "content": question}]}
        said = ask(llm, body).json()["choices"][0]["message"]["content"]
        return json.loads(said)  # type: ignore[no-any-return]

    for item in gazette:
        assert verdict(item)["score"] == 0.9 and "local news" in str(verdict(item)["reason"])
    for item in kept:
        assert verdict(item) == {"score": 0.1, "reason": "national news with nothing local in it"}


def _fetched(path: str) -> list[rss.base.FetchedItem]:
    feed = content.FEEDS[path]
    return list(rss._parse(str(feed), feed.read_bytes(), "application/rss+xml"))


def test_a_demo_news_draft_says_its_headline_once() -> None:
    """The demo model's post for a Gazette story, drafted from the story's page as full
    text reads it: the headline, then the story's first sentences, not the headline twice."""
    from bot.demo import site
    from pipelines.sources import articles

    story = site.ARTICLES["2024/05/12/library-weekend-hours"]
    text, _ = articles.extract(site.page(story, "/p.png"), "http://127.0.0.1:1/gazette/l")
    assert text is not None
    news = prompt.DraftItem(title=story.title, text=text, link=None, pipeline="news")
    post = demo_llm.write_post(prompt.render_prompt(content.PROMPT, news))
    assert post.count(story.title) == 1, post
    assert post.startswith(f"{story.title}: From 1 June"), post
    # Nor does the model repeat a headline the story's text still opens with.
    headed = prompt.DraftItem(
        title=story.title, text=f"{story.title}\n{text}", link=None, pipeline="news"
    )
    post = demo_llm.write_post(prompt.render_prompt(content.PROMPT, headed))
    assert post.count(story.title) == 1, post


def test_a_later_start_rewrites_only_the_demo_files_nobody_changed(tmp_path: Path) -> None:
    """The demo writes its pipelines at every start (their feed URLs follow its port), but
    never rewrites a file changed since it wrote it."""
    first = content.write(tmp_path, "http://127.0.0.1:1/")
    assert first.kept == ()
    news, team = first.pipelines_dir / "news.yaml", first.pipelines_dir / "team.yaml"
    mine = news.read_text().replace("schedule: 15m", "schedule: 5m")
    news.write_text(mine)
    again = content.write(tmp_path, "http://127.0.0.1:2/")
    assert again.kept == ("news.yaml",)
    assert news.read_text() == mine
    assert "127.0.0.1:2" in (first.pipelines_dir / "urgent.yaml").read_text()
    assert team.read_text().startswith(content.HEADER)
