"""The local Bot API server and the feed, as the bot's own end-to-end tests use them."""

from tests.e2e.test_bot_e2e import api, bot, feed  # noqa: F401
