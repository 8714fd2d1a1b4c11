"""An IMAP mailbox (Gmail or any IMAP4rev1 server), read with aioimaplib.

YAML:
    source:
      type: imap
      host: imap.gmail.com
      username: support@example.org
      password: "env:IMAP_PASSWORD"   # an app password; "env:VAR" reads VAR at fetch time
      search: UNSEEN                  # or "SINCE 3" (days), or ALL
Messages are fetched with BODY.PEEK[], so reading them never marks them \\Seen: whoever
reads the mailbox keeps its flags. Each is fetched on its own and only its first
`max_bytes` (a huge attachment is cut, the text before it kept). Each item's `extra`
carries what an SMTP reply needs.
"""

from __future__ import annotations

import contextlib
import email
import email.message
import email.policy
import email.utils
import hashlib
import itertools
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from pipelines.sources import base, common
from pipelines.text import redaction

if TYPE_CHECKING:
    import httpx

_SINCE = re.compile(r"^SINCE\s+(\d+)$", re.IGNORECASE)
_LITERAL = re.compile(rb"\{(\d+)\}$")
_UIDVALIDITY = re.compile(rb"\[UIDVALIDITY (\d+)\]")
# IMAP dates are English whatever the locale, so the month names are spelt out here.
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


class Config(common.ByteLimits):
    """Where the mailbox is and which messages to read."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["imap"]
    host: str
    port: int = Field(default=993, ge=1, le=65535)
    username: str
    #: The password, or "env:VAR" to read it from the environment at fetch time.
    password: SecretStr
    mailbox: str = "INBOX"
    ssl: bool = True
    #: "UNSEEN", "ALL", or "SINCE <days>" (messages from the last N days).
    search: str = "UNSEEN"
    max_messages: int = Field(default=50, ge=1)
    timeout_seconds: float = Field(default=30.0, gt=0)
    #: Dedup scope; defaults to "imap:<username>@<host>/<mailbox>".
    scope: str = ""
    #: The most of one message read, in bytes; unset: the configured default.
    max_bytes: int | None = Field(default=None, ge=1)
    #: Unused (the server sends messages as stored); kept so every source takes the same caps.
    max_decompressed_bytes: int | None = Field(default=None, ge=1)

    @field_validator("search")
    @classmethod
    def _check_search(cls, value: str) -> str:
        value = " ".join(value.split())
        if value.upper() in ("UNSEEN", "ALL") or _SINCE.match(value):
            return value
        raise ValueError('must be "UNSEEN", "ALL" or "SINCE <days>", e.g. "SINCE 3"')

    @model_validator(mode="after")
    def _default_scope(self) -> Config:
        if not self.scope:
            self.scope = f"imap:{self.username}@{self.host}/{self.mailbox}"
        return self


def search_criteria(search: str, now: datetime) -> list[str]:
    """The IMAP SEARCH keys for a configured `search`, with SINCE counted back from `now`."""
    match = _SINCE.match(search)
    if match is None:
        return [search.upper()]
    day = (now - timedelta(days=int(match.group(1)))).astimezone(UTC)
    return ["SINCE", f"{day.day:02d}-{_MONTHS[day.month - 1]}-{day.year}"]


async def fetch(
    config: Config, state: Mapping[str, str], client: httpx.AsyncClient
) -> base.Fetched:
    """The matching messages, oldest first, at most `max_messages`; the client is unused.

    `state` keeps the UIDVALIDITY and the highest UID returned. Because PEEK leaves mail
    unseen, an UNSEEN search would otherwise return the same oldest messages every run
    and, past `max_messages`, never reach newer ones.
    """
    password = common.resolve(config.password.get_secret_value(), "imap password")
    redaction.remember(password)
    where = f"{config.username}@{config.host}"
    import aioimaplib  # only a running engine reads mail: the CLI starts without it

    imap = (aioimaplib.IMAP4_SSL if config.ssl else aioimaplib.IMAP4)(
        host=config.host, port=config.port, timeout=config.timeout_seconds
    )
    try:
        return await _read(imap, config, password, state, datetime.now(UTC))
    except base.SourceError:
        raise
    except TimeoutError:
        raise base.SourceError(
            f"imap {where} timed out after {config.timeout_seconds:g} s"
        ) from None
    except OSError as exc:
        raise base.SourceError(
            f"imap {where}:{config.port} unreachable: {exc.strerror or exc}"
        ) from None
    except Exception as exc:
        # aioimaplib raises loosely typed errors; the type names what went wrong, and
        # nothing the server said can hold the password (aioimaplib scrubs it).
        raise base.SourceError(f"imap {where} failed: {type(exc).__name__}: {exc}") from None
    finally:
        await _close(imap)


async def _read(
    imap: Any, config: Config, password: str, state: Mapping[str, str], now: datetime
) -> base.Fetched:
    where = f"{config.username}@{config.host}"
    await imap.wait_hello_from_server()
    login = await imap.login(config.username, password)
    if login.result != "OK":
        raise base.SourceError(f"imap login failed for {where}")
    selected = await imap.select(config.mailbox)
    if selected.result != "OK":
        raise base.SourceError(f"imap {where}: cannot select mailbox {config.mailbox!r}")
    uidvalidity = _uidvalidity(selected.lines)
    last_uid = int(state.get("last_uid", "0")) if state.get("uidvalidity") == uidvalidity else 0
    criteria = search_criteria(config.search, now)
    if last_uid:
        criteria = ["UID", f"{last_uid + 1}:*", *criteria]
    found = await imap.uid_search(*criteria, charset=None)
    if found.result != "OK":
        raise base.SourceError(f"imap {where}: SEARCH {' '.join(criteria)} was refused")
    # "n:*" always matches the highest UID even when it is below n, hence the filter.
    uids = sorted(uid for uid in _search_uids(found.lines) if uid > last_uid)[: config.max_messages]
    raws = await _fetch_raw(imap, uids, where, config.limits.max_bytes)
    items = [_item(raw) for raw in raws]
    new_state = {"uidvalidity": uidvalidity, "last_uid": str(max(uids, default=last_uid))}
    return base.Fetched(items=items, state=new_state)


async def _fetch_raw(imap: Any, uids: list[int], where: str, max_bytes: int) -> list[bytes]:
    # One message per FETCH: the client buffers a whole answer, so this bounds it.
    raws: list[bytes] = []
    for uid in uids:
        answer = await imap.uid("fetch", str(uid), f"(BODY.PEEK[]<0.{max_bytes}>)")
        if answer.result != "OK":
            raise base.SourceError(f"imap {where}: FETCH was refused")
        # A literal follows the line that ends in {size}: that literal is the raw message.
        for line, following in itertools.pairwise(answer.lines):
            if _LITERAL.search(bytes(line)) and isinstance(following, bytearray):
                raws.append(bytes(following))
    return raws


async def _close(imap: Any) -> None:
    """Log out politely if connected, and always drop the connection."""
    with contextlib.suppress(Exception):
        if imap.protocol.state in ("AUTH", "SELECTED", "NONAUTH"):
            await imap.logout()
    task = imap._client_task  # aioimaplib keeps the connect task; a slow connect may pend
    if not task.done():
        task.cancel()
    transport = getattr(imap.protocol, "transport", None)
    if transport is not None:
        transport.close()


def _uidvalidity(lines: list[bytes]) -> str:
    for line in lines:
        if match := _UIDVALIDITY.search(bytes(line)):
            return match.group(1).decode()
    return ""


def _search_uids(lines: list[bytes]) -> list[int]:
    """UIDs from a SEARCH answer; aioimaplib strips the "SEARCH" keyword, some servers not."""
    uids: list[int] = []
    for line in lines[:-1]:  # the last line is the tagged "Search completed" text
        words = bytes(line).split()
        if words[:1] == [b"SEARCH"]:
            words = words[1:]
        if words and all(word.isdigit() for word in words):
            uids.extend(int(word) for word in words)
    return uids


def _item(raw: bytes) -> base.FetchedItem:
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, email.message.EmailMessage)  # guaranteed by policy.default
    message_id = str(message.get("Message-ID", "")).strip()
    subject = str(message.get("Subject", "")).strip()
    extra = {
        "from": str(message.get("From", "")),
        "to": str(message.get("To", "")),
        "cc": str(message.get("Cc", "")),
        "reply_to": str(message.get("Reply-To", "")),
        "subject": subject,
        "message_id": message_id,
        "references": " ".join(str(message.get("References", "")).split()),
        "in_reply_to": str(message.get("In-Reply-To", "")).strip(),
    }
    return base.FetchedItem(
        source_id=message_id or f"sha256:{hashlib.sha256(raw).hexdigest()}",
        title=subject,
        text=_text(message),
        published=_date(message),
        extra=extra,
    )


def _text(message: email.message.EmailMessage) -> str:
    body = message.get_body(preferencelist=("plain", "html"))
    if body is None:
        return ""
    try:
        content = body.get_content()
    except (LookupError, ValueError):  # an unknown charset or a broken transfer encoding
        payload = body.get_payload(decode=True)
        content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
    if not isinstance(content, str):
        return ""
    if body.get_content_subtype() == "html":
        return common.html_to_text(content)
    return content.strip()


def _date(message: email.message.EmailMessage) -> datetime | None:
    value = message.get("Date")
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    # A date without a zone is, by RFC 5322's own advice, best read as UTC.
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
