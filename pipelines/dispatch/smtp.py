"""SMTP dispatch: send the draft as a reply to the e-mail the item came from.

Called through `pipelines.dispatch.dispatch`. The reply threads under the
original (In-Reply-To, References) and carries a Message-ID derived from the
idempotency key, so a resend after a crash is the same message to any
receiver that dedupes on Message-ID.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.message import EmailMessage

import aiosmtplib

from pipelines.dispatch import base

_REPLY_PREFIX = re.compile(r"^\s*re\s*:", re.IGNORECASE)
#: How much of the server's reply text goes into an error message.
_REPLY_SNIPPET = 200


def message_id(delivery: base.Delivery) -> str:
    """The reply's Message-ID: the same for every send of one delivery."""
    return f"<{delivery.idempotency_key}@gatehouse>"


def reply_subject(subject: str) -> str:
    """ "Re: " + subject, without stacking a second "Re:"."""
    subject = " ".join(subject.split())
    return subject if _REPLY_PREFIX.match(subject) else f"Re: {subject}"


def build_message(
    target: base.SmtpTarget, delivery: base.Delivery, *, now: datetime
) -> EmailMessage:
    """The reply as an e-mail; PermanentDispatchError if the source can't be replied to."""
    source = delivery.source
    # A Reply-To names where the sender wants replies (lists, help desks); else From.
    to = source.get("reply_to") or source.get("from")
    if not isinstance(to, str) or "@" not in to:
        raise base.PermanentDispatchError(
            f"smtp dispatch: item {delivery.item_id} has no sender address ('from') to reply to"
        )
    subject = source.get("subject")
    original_id = source.get("message_id")
    message = EmailMessage()
    try:
        message["From"] = target.from_addr
        message["To"] = to
        message["Subject"] = reply_subject(
            subject if isinstance(subject, str) and subject.strip() else delivery.title
        )
        message["Date"] = email.utils.format_datetime(now)
        message["Message-ID"] = message_id(delivery)
        if isinstance(original_id, str) and original_id.strip():
            message["In-Reply-To"] = original_id.strip()
            message["References"] = " ".join([*_references(source.get("references")), original_id])
        message.set_content(_body(delivery))
    except ValueError as error:
        # The email package refuses header values with line breaks (header injection).
        raise base.PermanentDispatchError(
            f"smtp dispatch: item {delivery.item_id} cannot become a reply: {error}"
        ) from None
    return message


def _body(delivery: base.Delivery) -> str:
    """The reply's text, and its image as a link on a line of its own (a plain-text mail
    carries no picture, and a link is what a reader can open)."""
    if not delivery.image_url:
        return delivery.text
    return f"{delivery.text.rstrip()}\n\nImage: {delivery.image_url}\n"


def _references(value: object) -> list[str]:
    """The original's References, given as one string or a list of ids."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [ref.strip() for ref in value if isinstance(ref, str) and ref.strip()]
    return []


async def send(
    target: base.SmtpTarget,
    delivery: base.Delivery,
    *,
    env: Mapping[str, str] | None = None,
) -> base.DispatchResult:
    """Send the reply through the configured server; one connection, one attempt."""
    where = f"{target.host}:{target.port}"
    password = None
    if target.password_env is not None:
        password = base.read_env(target.password_env, env, needed_for=f"smtp {where}")
    message = build_message(target, delivery, now=datetime.now(UTC))
    try:
        await aiosmtplib.send(
            message,
            hostname=target.host,
            port=target.port,
            username=target.username,
            password=password,
            start_tls=target.starttls,
            timeout=target.timeout,
        )
    except aiosmtplib.SMTPException as error:
        raise _translate(error, where) from None
    except OSError as error:
        raise base.TransientDispatchError(
            f"smtp {where}: {type(error).__name__}: {error.strerror or error}"
        ) from None
    return base.DispatchResult(
        external_id=message_id(delivery), detail=f"sent to {message['To']} via {where}"
    )


def _translate(error: aiosmtplib.SMTPException, where: str) -> base.DispatchError:
    """SMTP 4xx, timeouts and dropped connections are transient; 5xx and refusals are not."""
    if isinstance(error, aiosmtplib.SMTPRecipientsRefused):
        codes = [refused.code for refused in error.recipients]
        replies = "; ".join(f"{r.code} {r.message}" for r in error.recipients)
        return _by_code(max(codes, default=550), f"smtp {where} refused the recipient: {replies}")
    if isinstance(error, aiosmtplib.SMTPResponseException):
        reply = f"{error.code} {error.message}"[:_REPLY_SNIPPET]
        return _by_code(error.code, f"smtp {where} answered {reply}")
    if isinstance(error, aiosmtplib.SMTPNotSupported):
        return base.PermanentDispatchError(f"smtp {where}: {error.message}")
    # Timeouts, refused or dropped connections: the server may be back soon.
    return base.TransientDispatchError(f"smtp {where}: {type(error).__name__}: {error}")


def _by_code(code: int, problem: str) -> base.DispatchError:
    if 400 <= code < 500:
        return base.TransientDispatchError(problem)
    return base.PermanentDispatchError(problem)
