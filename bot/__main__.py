"""Start the operator bot: `python -m bot` (the same as `gatehouse run`).

Settings come from the environment; see bot/settings.py and .env.example. The writer
lock is taken before the bot is imported, so a second instance is refused at once.
"""

import sys

from bot import early

sys.exit(early.run())
