"""Pipeline-file errors as an operator reads them: `file:line: field: reason`.

YAML node marks give the line of any key; pydantic's error locations are mapped
onto them, and its error kinds into words that say what is valid. Reading the file
(and refusing a hostile one) is yaml_file's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel


@dataclass(frozen=True)
class ConfigError:
    """One problem in one pipeline file, with the line and field where known."""

    file: Path
    line: int | None
    field: str | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        return f"{where}: {self.field}: {self.reason}" if self.field else f"{where}: {self.reason}"


_KINDS = {"sources": "source", "dispatch": "dispatch"}


def from_pydantic(
    file: Path, error: Any, node: yaml.Node, data: object, root: type[BaseModel]
) -> ConfigError:
    """A pydantic error as the operator reads it: file, line, dotted field and reason."""
    raw_loc: tuple[str | int, ...] = tuple(error["loc"])
    loc = _without_tags(raw_loc, data)
    if error["type"] in {"union_tag_invalid", "union_tag_not_found"}:
        loc = (*loc, "type")
    field = ".".join(str(part) for part in loc) or None
    return ConfigError(file, _line_at(node, loc), field, _reason(error, raw_loc, root))


def _reason(error: Any, raw_loc: tuple[str | int, ...], root: type[BaseModel]) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    noun = _KINDS.get(str(raw_loc[0]), str(raw_loc[0])) if raw_loc else "value"
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        model = _model_at(root, raw_loc[:-1])
        valid = f"; valid: {', '.join(model.model_fields)}" if model else ""
        return f"unknown field {raw_loc[-1]!r}{valid}"
    if kind == "union_tag_invalid":
        tags = str(ctx.get("expected_tags", "")).replace("'", "")
        return f"unknown {noun} type {ctx.get('tag')!r}; valid: {tags}"
    if kind == "union_tag_not_found":
        union = _strip(_type_at(root, raw_loc))
        tags = ", ".join(_tag(member) for member in get_args(union))
        return f"missing {noun} type; valid: {tags}"
    return plain(error)


#: pydantic's error types in the project's words; `{…}` names a value from the error's ctx.
_PLAIN = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "int_type": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "string_too_short": "must be at least {min_length} character(s) long",
    "string_too_long": "must be at most {max_length} characters long",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} items",
    "list_type": "must be a list",
    "dict_type": "must be a mapping of names to values",
    "model_type": "must be a mapping of names to values",
    "literal_error": "must be one of {expected}",
    "enum": "must be one of {expected}",
    "url_parsing": "must be a URL such as https://example.org/feed.xml",
    "json_invalid": "must be valid JSON",
    "missing": "is required",
}


def plain(error: Any) -> str:
    """One pydantic error in the project's words ("must be at least 1"), pydantic's own
    message when there is no better one."""
    ctx = error.get("ctx") or {}
    if error.get("type") == "value_error" and "error" in ctx:
        return str(ctx["error"])  # our own validators' words, without "Value error, "
    wording = _PLAIN.get(str(error.get("type")))
    if wording is None:
        return str(error["msg"])
    try:
        return wording.format(**ctx)
    except (KeyError, IndexError):
        return str(error["msg"])


def _without_tags(loc: tuple[str | int, ...], data: object) -> tuple[str | int, ...]:
    """The loc as the YAML spells it: pydantic inserts a union's tag ('rss') as a step."""
    kept: list[str | int] = []
    current = data
    for part in loc:
        if isinstance(current, dict) and part not in current and current.get("type") == part:
            continue
        kept.append(part)
        if isinstance(current, dict):
            current = current.get(part)
        elif isinstance(current, list) and isinstance(part, int) and 0 <= part < len(current):
            current = current[part]
        else:
            current = None
    return tuple(kept)


def _line_at(node: yaml.Node, loc: tuple[str | int, ...]) -> int:
    """The line of the deepest key or item of `loc` that the file has (1-based)."""
    line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((kv for kv in node.value if str(kv[0].value) == str(part)), None)
            if match is None:
                break
            line, node = match[0].start_mark.line + 1, match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if not 0 <= part < len(node.value):
                break
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def line_of(text: str, loc: tuple[str | int, ...]) -> int | None:
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    return _line_at(node, loc) if node is not None else None


def _type_at(root: type[BaseModel], loc: tuple[str | int, ...]) -> Any:
    """The annotation pydantic validated at `loc` (tags included), or None."""
    current: Any = root
    for part in loc:
        current = _strip(current)
        if isinstance(part, int):
            current = next(iter(get_args(current)), None)
        elif isinstance(current, type) and issubclass(current, BaseModel):
            found = current.model_fields.get(part)
            current = found.annotation if found else None
        else:
            current = next((m for m in get_args(current) if _tag(m) == part), None)
    return current


def _model_at(root: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    found = _strip(_type_at(root, loc))
    return found if isinstance(found, type) and issubclass(found, BaseModel) else None


def _strip(annotation: Any) -> Any:
    """The type under Annotated and under an optional block's `| None`."""
    while True:
        args = get_args(annotation)
        if get_origin(annotation) is Annotated:
            annotation = args[0]
        elif get_origin(annotation) in (Union, UnionType) and len(args) == 2 and NoneType in args:
            annotation = next(arg for arg in args if arg is not NoneType)
        else:
            return annotation


def _tag(model: Any) -> str:
    if isinstance(model, type) and issubclass(model, BaseModel) and "type" in model.model_fields:
        return str(next(iter(get_args(model.model_fields["type"].annotation)), ""))
    return ""
