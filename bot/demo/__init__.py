"""The offline demo.

`run` starts it, `webchat` serves the chat page (its files in `static/`), `botapi` is the
local Bot API server that stands in for Telegram, `llm` a priced stand-in LLM, `content`
the pipelines it runs, and `resume` what a restart with the same data directory keeps.
"""

#: The demo page's port on 127.0.0.1 (here, so the CLI's arguments need nothing else).
DEFAULT_PORT = 8780
