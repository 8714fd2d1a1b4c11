"""Draft validation: every draft, a model's or an operator's edit, passes the same checks."""

from __future__ import annotations

import json
from typing import Any

#: Telegram shows a card in pieces past 4096 characters; past this, nobody reads it.
MAX_DRAFT_CHARS = 20_000


class InvalidDraft(ValueError):
    """The draft does not meet the pipeline's rules; the message says which and why."""


def validate(text: str, schema: dict[str, Any] | None) -> None:
    """Non-empty, bounded, and (when the pipeline gives a JSON Schema) conforming to it."""
    if not text.strip():
        raise InvalidDraft("the draft is empty")
    if len(text) > MAX_DRAFT_CHARS:
        raise InvalidDraft(
            f"the draft has {len(text)} characters; at most {MAX_DRAFT_CHARS} are allowed"
        )
    if schema is None:
        return
    # Loaded already when the pipeline file's schema was checked: no stall here, and
    # a bot whose pipelines have no schema never loads it.
    import jsonschema

    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidDraft(
            f"the output is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema).iter_errors(document)
    )
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(the top level)"
        raise InvalidDraft(f"the output does not match the schema at {where}: {error.message}")
