"""Text cleaning and draft validation.

`clean` is the one cleaner of untrusted text: fetched titles and texts when they are
loaded, and every field a drafter reads, so a title and a draft never differ by an
invisible character. Every draft, a model's or an operator's edit, passes `validate`.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any

from store import errors

#: What marks a cut made by `clean`.
TRUNCATED = " […]"

# Zero-width and bidi controls hide or reorder text a reviewer reads ("Trojan Source").
# U+2066..U+2069 (bidi isolates) go too: they reorder text just like the overrides.
_INVISIBLE = (
    "".join(
        chr(c)
        for span in ((0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064), (0x2066, 0x2069))
        for c in range(span[0], span[1] + 1)
    )
    + "\ufeff"
)
_STRIP_RE = re.compile(
    "[" + "".join(f"\\u{ord(c):04x}" for c in _INVISIBLE) + r"\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def clean(text: str, limit: int) -> str:
    """`text` with no control or invisible characters, NFKC-normalized, at most `limit`
    characters (a cut is marked with " […]")."""
    # Normalizing a 50 MB text to keep 20,000 characters would cost 50 MB more: cut first,
    # leaving room for what the stripping removes.
    cut = len(text) > limit * 4
    unified = text[: limit * 4].replace("\r\n", "\n").replace("\r", "\n")
    cleaned = _STRIP_RE.sub("", unicodedata.normalize("NFKC", unified))
    if len(cleaned) <= limit and not cut:
        return cleaned
    return cleaned[: max(0, limit - len(TRUNCATED))].rstrip() + TRUNCATED


#: Telegram shows a card in pieces past 4096 characters; past this, nobody reads it.
MAX_DRAFT_CHARS = 20_000


class InvalidDraft(errors.Refused, ValueError):
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

    document = _parsed(text)
    try:
        error = jsonschema.exceptions.best_match(_validator()(schema).iter_errors(document))
    except RecursionError:  # a schema that refers to itself, walked as deep as the output
        raise InvalidDraft("the output is nested too deeply to check against the schema") from None
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(the top level)"
        raise InvalidDraft(f"the output does not match the schema at {where}: {error.message}")


def _parsed(text: str) -> Any:
    """The JSON document in `text`, or InvalidDraft for every way it fails to parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidDraft(
            f"the output is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise InvalidDraft("the output is not usable JSON: it is nested too deeply") from None
    except ValueError as exc:
        # Not a JSONDecodeError: an integer past Python's int_max_str_digits (4,300
        # digits) is refused by int() itself while the JSON is read.
        raise InvalidDraft(f"the output is not usable JSON: {str(exc)[:200]}") from None


def check_patterns(schema: object) -> None:
    """Refuse, naming it, a schema pattern that would run on model output outside RE2.

    A prompt injection controls that output, so every `pattern` runs on RE2 (linear
    time); `patternProperties` is refused, since jsonschema matches its patterns with
    Python's `re` in several places (propertyNames with a pattern does the same job).
    """
    from pipelines.text import safe_regex  # RE2: only pipelines with a schema load it

    for where, node in _mappings(schema, ()):
        at = f" (at {'/'.join(where)})" if where else ""
        if isinstance(node.get("patternProperties"), dict):
            raise ValueError(
                f"patternProperties is not supported{at}: its patterns would not run on RE2;"
                " use propertyNames with a pattern, or name the properties"
            )
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            try:
                safe_regex.compile(pattern)
            except safe_regex.Unsupported as exc:
                raise ValueError(f"{exc}{at}") from None


def _mappings(
    node: object, where: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    # Every mapping, not only the keywords known to hold schemas: a $ref may point anywhere.
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from _mappings(value, (*where, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _mappings(value, (*where, str(index)))


@functools.cache
def _validator() -> Any:
    """Draft 2020-12 with `pattern` matched by RE2 (built once, on first use)."""
    import jsonschema

    from pipelines.text import safe_regex

    def pattern(validator: Any, regex: str, instance: object, schema: object) -> Iterator[Any]:
        if isinstance(instance, str) and not safe_regex.search(regex, instance):
            yield jsonschema.ValidationError(f"{instance!r} does not match {regex!r}")

    draft = jsonschema.Draft202012Validator
    return jsonschema.validators.extend(draft, {"pattern": pattern})  # type: ignore[no-untyped-call]
