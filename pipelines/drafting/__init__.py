"""Drafting an item.

`base` holds the drafter contract and the template drafter, `llm` the LLM drafter,
`prompt` the prompt, its fencing and the template text.
"""
