"""Shared by the bot tests: a PTB Bot for the test file's own local Bot API server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from telegram import Bot

from bot.demo.botapi import localapi


@pytest.fixture
async def bot(api: localapi.LocalBotApi) -> AsyncIterator[Bot]:
    """A Bot with the token of the file's `api` server (each file sets up its own)."""
    assert api.token is not None, "the server must know the bot's token"
    async with Bot(api.token, base_url=api.base_url) as opened:
        yield opened
