"""A pipeline or voice file read as YAML, however hostile: `read` bounds its size and
`parse_yaml` its nesting depth and alias expansion before anything walks the document,
and refuses duplicate keys. What is wrong comes back as one Problem, with its line.

    text = yaml_file.read(path)
    node, data = yaml_file.parse_yaml(text)   # the node tree keeps every key's line
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


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
