"""The offline demo.

`run` starts it, `webchat` serves the chat page (its files in `static/`), and
`botapi` is the local Bot API server that stands in for Telegram.
"""
