"""A JSON API that answers a list of items, e.g. a ticket queue or a search endpoint.

YAML:
    source:
      type: http_json
      url: "https://api.example.org/v1/tickets?state=open"
      headers: {Authorization: "env:TICKETS_TOKEN"}   # read from the environment at fetch time
      items_path: data.items                          # dotted path to the list; "" = top level
      id_field: id
      title_field: subject
      text_field: body
      link_field: html_url                            # optional
Field names may be dotted too (`author.name`). Header values are never logged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from pipelines.sources import base, common

if TYPE_CHECKING:
    import httpx

#: The largest JSON element kept whole in an item's `extra` (characters).
MAX_EXTRA_CHARS = 100_000


class Config(common.WebSource):
    """Where the JSON lives and which fields make an item."""

    type: Literal["http_json"]
    #: Values are literal, or "env:VAR" to read VAR from the environment at fetch time.
    headers: dict[str, str] = Field(default_factory=dict)
    items_path: str = ""
    id_field: str = "id"
    title_field: str = "title"
    text_field: str = "text"
    link_field: str | None = None


async def fetch(
    config: Config, state: Mapping[str, str], client: httpx.AsyncClient
) -> base.Fetched:
    """One item per element of the list at `items_path`; a 304 keeps state and yields none."""
    headers = {"Accept": "application/json"}
    for name, value in config.headers.items():
        resolved = common.resolve(value, f"header {name}")
        if not resolved.isascii() or "\n" in resolved or "\r" in resolved:
            raise base.SourceError(f"header {name}: value must be ASCII on one line")
        headers[name] = resolved
    headers |= common.conditional_headers(state)
    response = await common.get(client, config.url, headers, config)
    if response.status_code == 304:
        return base.Fetched(items=[], state=dict(state))
    shown = common.redact_url(config.url)
    try:
        document = json.loads(response.content)
    except ValueError as exc:
        raise base.SourceError(f"{shown} did not answer valid JSON: {exc}") from None
    elements = _items_list(document, config.items_path, shown)
    items = [_item(config, element, index, shown) for index, element in enumerate(elements)]
    return base.Fetched(items=items, state=common.validators(response))


def _lookup(value: Any, path: str) -> tuple[bool, Any]:
    """(found, value) for a dotted path through nested objects; "" is the value itself."""
    for key in path.split(".") if path else []:
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value


def _items_list(document: Any, path: str, shown: str) -> list[Any]:
    found, value = _lookup(document, path)
    where = f"items_path {path!r}" if path else "the top level"
    if not found:
        raise base.SourceError(f"{shown}: items_path {path!r} not found in the JSON answer")
    if not isinstance(value, list):
        raise base.SourceError(f"{shown}: {where} is a {type(value).__name__}, expected a list")
    return value


def _item(config: Config, element: Any, index: int, shown: str) -> base.FetchedItem:
    found, source_id = _lookup(element, config.id_field)
    if not found or source_id is None or source_id == "":
        raise base.SourceError(f"{shown}: item {index} has no id field {config.id_field!r}")
    link = _lookup(element, config.link_field)[1] if config.link_field else None
    return base.FetchedItem(
        source_id=_as_text(source_id),
        title=_as_text(_lookup(element, config.title_field)[1]),
        text=_as_text(_lookup(element, config.text_field)[1]),
        link=_as_text(link) or None,
        extra=_extra(element),
    )


def _extra(element: Any) -> dict[str, Any]:
    # The element rides along for dispatchers; a huge one would be stored with every item.
    size = len(json.dumps(element, ensure_ascii=False))
    if size > MAX_EXTRA_CHARS:
        return {"item_omitted": f"{size} characters as JSON; at most {MAX_EXTRA_CHARS} are kept"}
    return {"item": element}


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
