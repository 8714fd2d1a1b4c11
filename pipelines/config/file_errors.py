"""Pipeline-file errors as an operator reads them: `file:line: field: reason`.

YAML node marks give the line of any key; pydantic's error locations are mapped
onto them, and its error kinds into words that say what is valid. A hostile file is
one error too: its size, nesting depth and alias expansion are bounded before anything
walks the document.
"""

from __future__ import annotations

from collections.abc import Iterator
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


class Problem(Exception):
    """A file that is not a YAML mapping of one pipeline: where, and why."""

    def __init__(self, line: int | None, field: str | None, reason: str) -> None:
        super().__init__(reason)
        self.line, self.field, self.reason = line, field, reason


#: The largest pipeline file read (bytes); a real one is a few KB.
MAX_FILE_BYTES = 256 * 1024
#: The deepest nesting of mappings and lists; a pipeline needs about 6.
MAX_DEPTH = 64
#: The most values aliases may add to a document once expanded: a real file uses a few
#: (`operators: *ops`); the values written out are bounded by MAX_FILE_BYTES instead.
MAX_ALIAS_VALUES = 20_000

_KINDS = {"sources": "source", "dispatch": "dispatch"}
_ALIAS_HINT = '; quote values that start with *, like schedule: "*/15 * * * *"'


def read(file: Path) -> str:
    """The file's text, or a Problem if it cannot be read or is too large to be a pipeline."""
    try:
        with file.open("rb") as stream:
            raw = stream.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise Problem(None, None, f"cannot read file: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise Problem(
            None,
            None,
            f"file larger than {MAX_FILE_BYTES} bytes, the most a pipeline file may hold"
            " (a pipeline is a few KB; one words rule can list many words)",
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Problem(None, None, f"cannot read file: not UTF-8 ({exc.reason})") from None


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the nesting depth bounded while the tree is composed
    (its composer recurses once per level: 20,000 levels would be a RecursionError)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.depth = 0

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # The scanner looks ahead over every open bracket (quadratic in their number),
        # so flow nesting is refused here, before the composer would see it.
        if self.flow_level >= MAX_DEPTH:
            line = self.get_mark().line + 1
            raise Problem(line, None, f"nested more than {MAX_DEPTH} levels deep")
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                raise Problem(line, None, f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _marked(exc: yaml.MarkedYAMLError) -> Problem:
    """Where PyYAML saw the problem, and where what it was reading began when that is
    another line: an unclosed quote is found at the end of the file, but opened earlier."""
    mark = exc.problem_mark or exc.context_mark
    line = mark.line + 1 if mark else None
    began = exc.context_mark.line + 1 if exc.context_mark else None
    if exc.context == "while scanning a quoted scalar" and began is not None:
        # The line to fix is the one the quote opened on.
        found = f"{exc.problem} at line {line}" if line is not None else exc.problem
        return Problem(
            began, None, f"invalid YAML: the quote opened on line {began} is never closed ({found})"
        )
    hint = _ALIAS_HINT if exc.context == "while scanning an alias" else ""
    if began is not None and began != line and exc.context:
        hint += f" ({exc.context.removeprefix('while ')} that starts on line {began})"
    return Problem(line, None, f"invalid YAML: {exc.problem}{hint}")


def parse_yaml(text: str, expected: str | None = None) -> tuple[yaml.Node, dict[str, Any]]:
    """The node tree (for line numbers) and the data, or a Problem. `expected` says what
    the file holds when it is not a pipeline file (a voice file)."""
    found = _with_libyaml(text)
    node, data = found if found is not None else _with_python(text)
    if node is None:
        raise Problem(
            None, None, f"empty file: expected {expected or 'the fields of one pipeline'}"
        )
    if not isinstance(node, yaml.MappingNode) or not isinstance(data, dict):
        mapping = expected or "a mapping of pipeline fields (name: ..., schedule: ...)"
        raise Problem(node.start_mark.line + 1, None, f"expected {mapping}, got {node.tag}")
    _check_duplicate_keys(node, ())
    return node, data


def _with_libyaml(text: str) -> tuple[yaml.Node | None, Any] | None:
    """The tree by libyaml, some 30 times faster than PyYAML's own parser (a file of
    4,500 rules: 0.05 s, not 0.7 s); None when libyaml is missing or finds anything
    amiss, and PyYAML's parser then says what, in the words an operator has always read."""
    loader_class = getattr(yaml, "CSafeLoader", None)
    if loader_class is None or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return None
    try:
        # Its composer recurses once per level: the depth is known before it runs.
        if _deeper_than(MAX_DEPTH, yaml.parse(text, Loader=loader_class)):
            return None
        loader = loader_class(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_size(node)
            return node, loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError:
        return None


def _deeper_than(limit: int, events: Iterator[yaml.Event]) -> bool:
    depth = 0
    for event in events:
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > limit:
                return True
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return False


def _with_python(text: str) -> tuple[yaml.Node | None, Any]:
    try:
        # PyYAML's reader refuses control characters here, in the constructor.
        loader = _BoundedLoader(text)
    except yaml.reader.ReaderError as exc:
        raise _unprintable(text, exc) from None
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_size(node)
        return node, loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        raise _marked(exc) from None
    except yaml.YAMLError as exc:
        raise Problem(None, None, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _unprintable(text: str, exc: yaml.reader.ReaderError) -> Problem:
    """A character YAML refuses anywhere in a file (a NUL, a BEL, ...), with where it is."""
    line = text.count("\n", 0, exc.position) + 1
    column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
    return Problem(
        line,
        None,
        f"invalid YAML: unprintable character U+{exc.character:04X} at column {column};"
        " YAML allows tabs, line breaks and printable characters: remove it",
    )


def _check_size(root: yaml.Node) -> None:
    """Refuse a document whose aliases add more than MAX_ALIAS_VALUES values once
    expanded (a "billion laughs" file); values written out count for nothing here.

    Aliases share nodes, so each node's expanded size is counted once, children first,
    without ever walking the expansion itself; what aliases add is that size less the
    nodes the document really holds.
    """
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    bound = _distinct(root) + MAX_ALIAS_VALUES
    while stack:
        node, ready = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not ready:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        size = 1 + sum(sizes.get(id(child), 0) for child in children)
        if size > bound:
            raise Problem(
                node.start_mark.line + 1,
                None,
                f"its aliases (&anchor / *alias) expand to more than {MAX_ALIAS_VALUES}"
                ' values beyond those written out (a "billion laughs" file): write the'
                " values out",
            )
        sizes[id(node)] = size


def _distinct(root: yaml.Node) -> int:
    """How many nodes the document holds, each aliased node once."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(_children(node))
    return len(seen)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_duplicate_keys(node: yaml.Node, path: tuple[str, ...]) -> None:
    # PyYAML silently keeps the last of two equal keys; an operator would never notice.
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = str(key.value)
            if name in seen:
                dotted = ".".join((*path, name))
                raise Problem(key.start_mark.line + 1, dotted, f"duplicate key {name!r}")
            seen.add(name)
            _check_duplicate_keys(value, (*path, name))
    elif isinstance(node, yaml.SequenceNode):
        for index, child in enumerate(node.value):
            _check_duplicate_keys(child, (*path, str(index)))


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
