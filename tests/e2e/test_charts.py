"""Charts end to end: the real bot process answers /status chart, /budget chart and
/stats chart with photos, which arrive at the local Bot API server as PNG pictures of the
promised size."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

import httpx
from PIL import Image

from bot.demo.botapi import localapi
from bot.web import charts
from tests.e2e.test_bot_e2e import OPERATOR, TOKEN, BotProcess, tap, two_cards, version_of


def photo_reply(api: localapi.LocalBotApi, command: str) -> Any:
    before = len(api.sent(OPERATOR))
    api.inject_command(OPERATOR, OPERATOR, command)
    replies = api.wait_for(lambda: api.sent(OPERATOR)[before:], timeout=60)
    assert replies[-1].photo is not None, replies[-1].text
    return replies[-1]


def check_png(
    api: localapi.LocalBotApi, message: Any, size: tuple[int, int] = (charts.WIDTH, charts.HEIGHT)
) -> None:
    data = api.photo(OPERATOR, message.message_id)
    assert data is not None and data.startswith(b"\x89PNG\r\n\x1a\n")
    with Image.open(io.BytesIO(data)) as picture:
        picture.verify()  # the whole file decodes: chunks and checksums
    with Image.open(io.BytesIO(data)) as picture:
        assert (picture.format, picture.size) == ("PNG", size)
    assert message.photo == {"width": size[0], "height": size[1], "file_size": len(data)}


def test_charts_arrive_as_photos(bot: BotProcess, api: localapi.LocalBotApi) -> None:
    first, _ = two_cards(api)
    tap(api, OPERATOR, first, "Approve")
    version_of(api, first.message_id, 2)  # decided: the week has one approval wait

    status = photo_reply(api, "/status chart")
    assert status.text == "runs and approval waits, last 7 days"  # the caption
    check_png(api, status)
    budget = photo_reply(api, "/budget chart")
    assert "AI spend per scope" in budget.text
    check_png(api, budget)
    numbers = photo_reply(api, "/stats news 30d chart")
    assert numbers.text == "the editor's numbers, last 30 days"
    check_png(api, numbers)
    assert "Traceback" not in bot.log.read_text()


def test_the_bot_starts_without_matplotlib() -> None:
    probe = "import sys, bot.app, bot.web.charts; print('matplotlib' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False"


def test_the_local_server_refuses_a_picture_that_is_not_png(api: localapi.LocalBotApi) -> None:
    url = f"{api.base_url}{TOKEN}/sendPhoto"
    answer = httpx.post(
        url, data={"chat_id": str(OPERATOR)}, files={"photo": ("x.jpg", b"\xff\xd8 not png")}
    )
    assert answer.status_code == 400 and "PNG" in answer.json()["description"]
    by_id = httpx.post(url, data={"chat_id": str(OPERATOR), "photo": "AgAD-file-id"})
    assert by_id.status_code == 400 and "wrong file identifier" in by_id.json()["description"]
    assert api.sent(OPERATOR) == []
