"""Pipeline sources: one config model and one `fetch` per source type.

Use `SourceConfig` as the `source:` field of a pipeline model (pydantic picks the
model by its `type`), then call `await sources.fetch(config, state, client)`.
Every failure comes out as `base.SourceError` with a message that holds no secret.
Titles and texts come out cleaned (`validation.clean`) and capped at MAX_TITLE_CHARS and
MAX_TEXT_CHARS, so a 50 MB description never becomes one item whole.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from pipelines.ground import addresses
from pipelines.sources import base, folder, http_json, images, imap, rss
from pipelines.text import validation

if TYPE_CHECKING:
    import httpx

#: The longest title an item keeps (characters); a card shows far fewer.
MAX_TITLE_CHARS = 1_000
#: The longest text an item keeps (characters); drafters read at most 20,000 of it.
MAX_TEXT_CHARS = 50_000

SourceConfig = Annotated[
    rss.Config | http_json.Config | folder.Config | imap.Config, Field(discriminator="type")
]


async def fetch(
    config: SourceConfig, state: Mapping[str, str], client: httpx.AsyncClient
) -> base.Fetched:
    """Run the source `config` describes; anything but a SourceError is turned into one."""
    fetched = await _fetch(config, state, client)
    found = [_bounded(item) for item in fetched.items]
    # Only a web source can allow private addresses; a folder's or a mailbox's may not.
    allow = bool(getattr(config, "allow_private_addresses", False))
    resolve = addresses.resolver_of(client)
    found = await images.public(found, allow_private=allow, resolve=resolve)
    return dataclasses.replace(fetched, items=found)


def _bounded(item: base.FetchedItem) -> base.FetchedItem:
    # source_id stays as the source made it: dedup must see the same id as before.
    title = validation.clean(item.title, MAX_TITLE_CHARS)
    text = validation.clean(item.text, MAX_TEXT_CHARS)
    image_url = images.checked(item.image_url)
    return dataclasses.replace(item, title=title, text=text, image_url=image_url)


async def _fetch(
    config: SourceConfig, state: Mapping[str, str], client: httpx.AsyncClient
) -> base.Fetched:
    try:
        match config:
            case rss.Config():
                return await rss.fetch(config, state, client)
            case http_json.Config():
                return await http_json.fetch(config, state, client)
            case folder.Config():
                return await folder.fetch(config, state, client)
            case imap.Config():
                return await imap.fetch(config, state, client)
    except base.SourceError:
        raise
    except Exception as exc:
        # A bug or an unforeseen library error: its text might quote a URL or a header,
        # so only the type is shown; the chained exception keeps the detail for debugging.
        raise base.SourceError(
            f"{config.type} source {config.scope} failed unexpectedly: {type(exc).__name__}"
        ) from exc
    raise base.SourceError(f"unknown source type {config.type!r}")  # unreachable with pydantic
