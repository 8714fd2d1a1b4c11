"""Start the operator bot: `python -m bot` (the same as `gatehouse run`).

Settings come from the environment; see bot/settings.py and .env.example.
"""

import sys

from bot import app

sys.exit(app.main())
