"""docs/architecture.md's map follows the tree: every package has its heading there, every
module of a package is listed under it, and nothing listed there is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "architecture.md"
_HEADING = re.compile(r"^#### `(?P<package>[\w/]+)/`:", re.M)
_MODULE = re.compile(r"^- `(?P<module>\w+)`:", re.M)


def documented() -> dict[str, set[str]]:
    """Each package the map names, with the modules listed under its heading."""
    text = MAP.read_text()
    headings = list(_HEADING.finditer(text))
    found: dict[str, set[str]] = {}
    for heading, following in zip(headings, [*headings[1:], None], strict=True):
        end = following.start() if following else len(text)
        section = text[heading.end() : end].split("\n\n#")[0]
        found[heading["package"]] = {m["module"] for m in _MODULE.finditer(section)}
    return found


def packages() -> dict[str, set[str]]:
    """Each package of bot, pipelines and store, with its modules (not __init__)."""
    found = {}
    for top in ("bot", "pipelines", "store"):
        for init in sorted((ROOT / top).rglob("__init__.py")):
            package = init.parent
            found[package.relative_to(ROOT).as_posix()] = {
                path.stem for path in package.glob("*.py") if path.name != "__init__.py"
            }
    return found


def test_every_package_has_its_heading_and_every_heading_its_package() -> None:
    assert sorted(documented()) == sorted(packages())


def test_every_module_is_listed_under_its_package_and_every_listed_one_exists() -> None:
    doc, tree = documented(), packages()
    missing = {p: sorted(tree[p] - doc.get(p, set())) for p in tree if tree[p] - doc.get(p, set())}
    gone = {p: sorted(doc[p] - tree.get(p, set())) for p in doc if doc[p] - tree.get(p, set())}
    assert not missing, f"modules docs/architecture.md does not list: {missing}"
    assert not gone, f"modules docs/architecture.md lists that do not exist: {gone}"


def test_the_map_is_read_at_all() -> None:
    """A heading format that stopped matching would pass the two tests above vacuously."""
    doc = documented()
    assert "store/backends" in doc
    assert "writer" in doc["store/backends"]
