"""`python -m bot.cli`: the `gatehouse` command without the installed script."""

import sys

from bot.cli.main import main

sys.exit(main())
