"""bench voice is registered, lints what it says it lints, and ends in its JSON line."""

from __future__ import annotations

import json

import pytest

from bench import voice
from bench.__main__ import BENCHES
from pipelines.voice import lint


def test_the_draft_has_the_size_asked_and_the_profile_its_rules() -> None:
    assert BENCHES["voice"] == "bench.voice"
    assert [len(voice.draft(size)) for size in voice.SIZES] == list(voice.SIZES)
    assert not voice.draft(1000).isascii()  # a real draft's slower path is the one timed
    rules = voice.profile_rules(200)
    assert len(rules.rules) == 200 + len(lint.default_rules().rules)


async def test_a_smoke_run_ends_in_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    await voice.main(["--smoke"])
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["bench"] == "voice" and figures["profile_rules"] == 200
    assert figures["chars"] == 4000 and figures["tells"] >= 3
    assert {f"p50_ms_at_{size}" for size in voice.SIZES} <= figures.keys()
