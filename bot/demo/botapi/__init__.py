"""A local Telegram Bot API server, for the demo and the tests.

`server` owns it, `state` holds the chats, `methods` answers the Bot API calls,
`http` serves them, `control` lets a page or a test drive it, `html` reads a
message's HTML markup as Telegram does.
"""
