"""The full-text step of drafting: for an item of a source with `full_text: true`, the
drafter reads the linked article as `text` and the feed's teaser as `summary`.

    plan = plan.reading(fulltext.Reading(fetcher, pipeline, lengths))   # the engine, each tick
    work = await step.run(work)   # the article fetched; the draft step drafts from it

It runs after dedup, filters and triage (only items that will be drafted are fetched)
and before the draft's budget claim. The article is not stored: the item's payload and its content
hash stay as fetched, and a drafting resumed after a crash fetches the page again. A
failed fetch or a page with no article leaves the teaser, and `note` says why in one
line. The page's image (og:image, twitter:image) is used when the feed gave none.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pipelines import sources
from pipelines.drafting import steps
from pipelines.sources import articles, http_json, rss
from pipelines.text import validation
from store.items import Item

if TYPE_CHECKING:
    from pipelines.config import spec


@dataclasses.dataclass(frozen=True)
class Reading:
    """The step that reads the item's article (with its card's line when the teaser stands
    in) for the draft step after it."""

    fetcher: articles.Fetcher
    pipeline: spec.Pipeline
    lengths: bool

    async def run(self, work: steps.Work) -> steps.Work:
        read, line = await enrich(self.fetcher, self.pipeline, work.item, lengths=self.lengths)
        after = work.after if line is None else (*work.after, line)
        image = read.payload.get("image_url")
        return dataclasses.replace(work, item=read, after=after, image_url=image)


def source_of(pipeline: spec.Pipeline, item: Item) -> sources.SourceConfig | None:
    """The source the item came from (by its dedup scope), if the pipeline still has it."""
    return next((source for source in pipeline.sources if source.scope == item.scope), None)


def used(pipelines: Iterable[spec.Pipeline]) -> bool:
    """Whether any of these pipelines has a source that asks for full text."""
    return any(
        isinstance(source, rss.Config | http_json.Config) and source.full_text
        for pipeline in pipelines
        for source in pipeline.sources
    )


def wanted(pipeline: spec.Pipeline, item: Item) -> articles.Source | None:
    """The item's source when it asks for full text."""
    source = source_of(pipeline, item)
    if isinstance(source, rss.Config | http_json.Config) and source.full_text:
        return source
    return None


async def enrich(
    fetcher: articles.Fetcher, pipeline: spec.Pipeline, item: Item, *, lengths: bool = False
) -> tuple[Item, str | None]:
    """The item as the drafter reads it, and the card's line when the teaser is used
    (with `lengths`, as a dry run asks, also the article's length when it is not)."""
    source = wanted(pipeline, item)
    if source is None:
        return item, None
    link = item.payload.get("link")
    article = await fetcher.fetch(link, source, articles.user_agent(pipeline.name))
    if lengths and article.text:
        return with_article(item, article), f"📄 full text: {len(article.text):,} characters"
    return with_article(item, article), note(article)


def with_article(item: Item, article: articles.Article) -> Item:
    """A copy of `item` whose payload holds the article (and the page's image)."""
    payload = dict(item.payload)
    payload["summary"] = payload.get("text", "")
    if article.text:
        # The page's heading may be worded as the feed's title, not the page's <title>.
        text = articles.without_heading(article.text, payload.get("title"))
        payload["text"] = validation.clean(text, sources.MAX_TEXT_CHARS)
    if article.image_url and not payload.get("image_url"):
        payload["image_url"] = article.image_url
    return dataclasses.replace(item, payload_json=json.dumps(payload, ensure_ascii=False))


def note(article: articles.Article) -> str | None:
    """One line for the card when the article was not used."""
    if article.text:
        return None
    return f"📄 full text not used ({article.reason}): drafted from the feed's teaser"
