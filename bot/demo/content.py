"""The demo's pipelines, written into its data directory at each start, and its budget.

    files = content.write(data_dir, web_url)     # pipeline YAML, prompt, out/ dirs
    files.kept                                   # files of the demo's you changed: left as they are
    settings.llm, settings.prices = content.llm(llm_server.base_url), content.PRICES

- `news`: the bundled Riverside Gazette feed, drafted by the demo's LLM (so cards show a
  cost and the budget fills), approved by either operator, filed under out/news; and a
  national wire whose sponsored entries its filter drops and whose other entries its
  priced triage skips (nothing local in them), so /skipped and /stats have entries.
- `team`: the bundled release notes, drafted by the template, posted as one card per
  item into the "Releases" topic of a forum group (the team room) where any two of the
  three demo operators approve it (quorum 2) before it is filed under out/team. Three,
  so that a draft one of them edited can still be approved by the other two (four eyes:
  an editor may not approve their own version).
- `urgent`: one breaking story with a 90-second approval window, so the SLA warning
  arrives within the first minute with 40 s left to act on it (and, unanswered, the
  card expires).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from pipelines.providers import client as providers
from store.ledger import prices as ledger_prices

log = logging.getLogger(__name__)

EXAMPLES = Path(__file__).resolve().parents[2] / "pipelines" / "examples"
#: The feeds the page server serves, by path.
FEEDS = {
    "/feeds/demo.xml": EXAMPLES / "feeds" / "demo.xml",
    "/feeds/urgent.xml": EXAMPLES / "feeds" / "urgent.xml",
    "/feeds/wire.xml": EXAMPLES / "feeds" / "wire.xml",
}
NOTES = EXAMPLES / "notes"
#: The demo page's port unless --port says otherwise (0 picks a free one).
#: The demo LLM's model and the key the demo's settings present to it (a made-up key
#: for a local stand-in, checked as a provider would).
MODEL = "demo-model"
#: The cheap model the news pipeline's triage asks (the same demo server answers it).
TRIAGE_MODEL = "demo-triage"
API_KEY = "demo-key-not-secret"
#: The demo's operators: the page speaks as any one of them.
OPERATORS = (1001, 1002, 1003)
#: Their first names and usernames, shown wherever the bot says who acted.
NAMES = {1001: ("Alex", "alex"), 1002: ("Sam", "sam"), 1003: ("Kim", "kim")}
#: The team room: a forum supergroup the operators are in, and its topic for the cards.
ROOM = -1001000000001
ROOM_TITLE = "Team room"
ROOM_TOPIC = "Releases"
#: The demo model's price: dear on purpose, so five drafts cross a budget alert.
#: The triage model is a hundredth of that: its questions barely move the budget.
PRICES = {
    MODEL: ledger_prices.Price(input_micros_per_mtok=2_000_000, output_micros_per_mtok=200_000_000),
    TRIAGE_MODEL: ledger_prices.Price(
        input_micros_per_mtok=20_000, output_micros_per_mtok=2_000_000
    ),
}
#: The day's budget for every pipeline together, in USD. A draft holds about $0.018
#: (its worst case) and costs about $0.011: the feed's five drafts fit side by side, and
#: once settled they pass 50 %, so the threshold alert fires.
BUDGET_USD = "0.10"
#: Seconds the demo model takes to answer, so a /budget sent meanwhile shows holds.
LLM_DELAY_S = 1.5
#: The SLA sweep's pass in the demo (seconds): the urgent window is short.
SWEEP_EVERY_S = 2.0

PROMPT = """\
Write a short post for the Riverside Gazette's channel: the headline, then one or two
sentences from the story. Keep names and numbers exact.

Headline:
{title}

Story:
{text}
"""

NEWS = """\
# Written by `gatehouse demo`: the bundled feed, drafted by the demo's LLM; a wire whose
# sponsored entries the filter drops and the rest the triage skips (see /skipped, /stats).
name: news
schedule: 15m
sources:
  - type: rss
    url: {web}/feeds/demo.xml
    scope: demo-news
    # Draft from the linked article (the demo's own pages, so on 127.0.0.1).
    full_text: true
    allow_private_addresses: true
  - type: rss
    url: {web}/feeds/wire.xml
    scope: demo-wire
filter:
  exclude:
    - words: [sponsored]
triage:
  question: "Is this local news for people in Riverside?"
  model: {triage_model}
  threshold: 0.5
draft:
  drafter: llm
  prompt: prompts/news.txt
  max_tokens: 80
approval:
  quorum: 1
  window: 24h
dispatch:
  type: file
  path: {out}/news
"""

TEAM = """\
# Written by `gatehouse demo`: release notes that need two of the three operators'
# approval; an edited note needs two besides its editor (four eyes).
name: team
schedule: 15m
sources:
  - type: folder
    path: {notes}
    pattern: "*.md"
    scope: demo-notes
approval:
  operators: [{operators}]
  quorum: 2
  window: 24h
  chat: {room}
  topic: {topic}
dispatch:
  type: file
  path: {out}/team
"""

URGENT = """\
# Written by `gatehouse demo`: breaking news with a short approval window.
name: urgent
schedule: 15m
sources:
  - type: rss
    url: {web}/feeds/urgent.xml
    scope: demo-urgent
approval:
  quorum: 1
  window: 90s
dispatch:
  type: file
  path: {out}/urgent
"""


#: In the pipelines directory: the SHA-256 of each file as the demo last wrote it, so a
#: later start rewrites only files still as it left them (their feed URLs follow the port).
WRITTEN = ".written.json"
#: How every pipeline file of the demo's begins (one from before WRITTEN was kept is its own).
HEADER = "# Written by `gatehouse demo`"


@dataclass(frozen=True)
class Files:
    pipelines_dir: Path
    #: Where approved posts land, one folder per pipeline.
    out_dir: Path
    #: The demo's files someone changed since it wrote them: left as they are.
    kept: tuple[str, ...] = ()


def write(data_dir: Path, web_url: str) -> Files:
    """Write the pipelines (pointed at the page server's feeds) and the prompt, except a
    file changed since the demo wrote it: the demo never rewrites what it did not write."""
    pipelines_dir, out = data_dir / "pipelines", data_dir / "out"
    (pipelines_dir / "prompts").mkdir(mode=0o700, parents=True, exist_ok=True)
    web = web_url.rstrip("/")
    operators = ", ".join(map(str, OPERATORS))
    texts = {
        "prompts/news.txt": PROMPT,
        "news.yaml": NEWS.format(web=web, out=out, triage_model=TRIAGE_MODEL),
        "team.yaml": TEAM.format(
            notes=NOTES, operators=operators, out=out, room=ROOM, topic=ROOM_TOPIC
        ),
        "urgent.yaml": URGENT.format(web=web, out=out),
    }
    record = pipelines_dir / WRITTEN
    written = _read_record(record)
    kept = []
    for name, text in texts.items():
        path = pipelines_dir / name
        if path.exists() and not _ours(path, written.get(name), text):
            kept.append(name)
            log.warning("kept %s as it is: it changed since the demo wrote it", path)
            continue
        path.write_text(text)
        written[name] = _digest(text.encode())
    record.write_text(json.dumps(written, indent=1, sort_keys=True))
    return Files(pipelines_dir, out, tuple(kept))


def _ours(path: Path, digest: str | None, text: str) -> bool:
    """Whether `path` is still as the demo wrote it (or already what it would write)."""
    found = path.read_bytes()
    if digest is None:  # a data directory from before the record: the demo's own header
        return found == text.encode() or found.startswith(HEADER.encode())
    return _digest(found) == digest


def _read_record(record: Path) -> dict[str, str]:
    try:
        found = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def llm(base_url: str) -> providers.ProviderSettings:
    return providers.ProviderSettings(
        kind="openai",
        base_url=base_url,
        api_key=API_KEY,  # type: ignore[arg-type]  # pydantic makes it a SecretStr
        model=MODEL,
    )
