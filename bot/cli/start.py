"""The `gatehouse` console script and `python -m bot.cli`: the command line, loaded with
the cyclic collector paused (see `bot.early.loading`).

    sys.exit(start.main())
"""

from __future__ import annotations

from bot import early


def main() -> int:
    with early.loading():
        from bot.cli import main

    return main.main()
