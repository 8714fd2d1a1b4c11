"""LLM providers.

`settings` says which provider and model, `client` makes the call, `wire` speaks
each provider's JSON.
"""
