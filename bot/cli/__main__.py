"""`python -m bot.cli`: the `gatehouse` command without the installed script."""

import sys

from bot.cli import start

sys.exit(start.main())
