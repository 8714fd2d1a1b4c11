"""The offline demo.

`run` starts it, `webchat` serves the chat page (its files in `static/`), `botapi` is the
local Bot API server that stands in for Telegram, `llm` a priced stand-in LLM, `content`
the pipelines it runs, and `resume` what a restart with the same data directory keeps.
"""
