"""The audit export, and its offline check.

    n = await audit_export.write(store, out, fmt="jsonl", since=None)
    report = audit_export.verify(open("audit.jsonl"), [audit_keys.parse_public(key_text)])

An export holds the events in chain order, each with its hash and the hash it chains
to, then the signed checkpoints that name exported events or later ones. `verify`
needs no store: it recomputes every hash and link (an edited row or a removed one
breaks them), checks each checkpoint's Ed25519 signature with the given key its
`key_id` names (a store restored under a new key holds checkpoints of both), and
compares the newest checkpoint with the export's last event: an export that ends
before a signed head lost its tail. In CSV an empty cell is an empty text and `\\N` a missing value.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TextIO

from store import clock, units
from store.audit import checkpoints, events
from store.db import Store

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ed25519

Format = Literal["jsonl", "csv"]
FORMATS: tuple[Format, ...] = ("jsonl", "csv")
#: Events read per query while exporting.
BATCH = 5000
#: The longest line (or CSV field) verify reads: an event is a few hundred bytes.
MAX_LINE = 1 << 20
NULL = "\\N"
EVENT_FIELDS = (
    "id",
    "entity",
    "entity_id",
    "from_state",
    "to_state",
    "actor",
    "attempt",
    "reason",
    "at",
    "prev_hash",
    "hash",
)
CHECKPOINT_FIELDS = ("event_id", "hash", "signed_at", "key_id", "signature")
COLUMNS = ("record", *EVENT_FIELDS, "signed_at", "key_id", "signature", "at_utc")
_INTS = ("id", "attempt", "at", "event_id", "signed_at")


# -- writing ---------------------------------------------------------------------------


async def write(
    store: Store, out: TextIO, fmt: Format = "jsonl", since: datetime | None = None
) -> int:
    """Write events (those at or after `since`, if given) and their checkpoints; returns
    how many events were written."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    emit = _csv_writer(out) if fmt == "csv" else _jsonl_writer(out)
    since_ms = clock.to_ms(since) if since is not None else None
    next_id, first_id, written = 1, None, 0
    while True:
        rows = await checkpoints.events_from(store, next_id, BATCH)
        for row in rows:
            if since_ms is not None and row["at"] < since_ms and first_id is None:
                continue
            first_id = row["id"] if first_id is None else first_id
            emit({"record": "event", **row, "at_utc": clock.from_ms(row["at"]).isoformat()})
            written += 1
        if len(rows) < BATCH:
            break
        next_id = rows[-1]["id"] + 1
    if first_id is not None:
        for cp in await checkpoints.since(store, first_id):
            signed = clock.to_ms(cp.signed_at)
            emit(
                {
                    "record": "checkpoint",
                    "event_id": cp.event_id,
                    "hash": cp.hash,
                    "signed_at": signed,
                    "key_id": cp.key_id,
                    "signature": cp.signature,
                    "at_utc": cp.signed_at.isoformat(),
                }
            )
    return written


def _jsonl_writer(out: TextIO) -> Any:
    def emit(record: dict[str, Any]) -> None:
        out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")

    return emit


def _csv_writer(out: TextIO) -> Any:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)

    def emit(record: dict[str, Any]) -> None:
        if record["record"] == "checkpoint":
            record = {**record, "id": record["event_id"]}
        writer.writerow([_cell(record.get(name)) for name in COLUMNS])

    return emit


def _cell(value: Any) -> str:
    return NULL if value is None else str(value)


# -- reading and checking -----------------------------------------------------------------


class Malformed(ValueError):
    """A line of the export cannot be read; the message names it."""


@dataclass
class Report:
    events: int = 0
    checkpoints: int = 0
    first_id: int | None = None
    last_id: int | None = None
    #: The newest checkpoint seen: (event id, signed at).
    newest: tuple[int, datetime] | None = None
    problems: list[str] = field(default_factory=list)
    #: Checkpoints signed by a key that was not given: not a sign of tampering, but
    #: nothing they vouch for is checked until that key is given.
    unverified: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.problems or self.unverified)


def lines_of(file: TextIO) -> Iterator[str]:
    """A file's lines, each read at most MAX_LINE + 1 characters at a time, so a file with
    no line breaks never fills memory (the overlong line is then refused)."""
    while line := file.readline(MAX_LINE + 1):
        yield line


def records(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) from a JSON-lines or CSV export, told apart by the first line."""
    it = iter(lines)
    first = next(it, "")
    if not first.strip():
        return
    if first.lstrip().startswith("{"):
        yield from _jsonl(first, it)
    else:
        yield from _csv(first, it)


def _bounded(number: int, line: str) -> str:
    if len(line) > MAX_LINE:
        raise Malformed(f"line {number} is longer than {MAX_LINE} characters")
    return line


def _jsonl(first: str, rest: Iterator[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(itertools.chain([first], rest), start=1):
        if line.strip():
            yield number, _json_record(number, _bounded(number, line))


def _json_record(number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise Malformed(f"line {number} is not JSON: {exc.msg}") from None
    if not isinstance(record, dict):
        raise Malformed(f"line {number} is not a JSON object")
    return record


def _csv(first: str, rest: Iterator[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    csv.field_size_limit(MAX_LINE)
    header = next(csv.reader([first]))
    if tuple(header) != COLUMNS:
        raise Malformed("line 1 is neither a JSON record nor the CSV header " + ",".join(COLUMNS))
    for number, row in enumerate(csv.reader(rest), start=2):
        if len(row) != len(COLUMNS):
            raise Malformed(f"line {number} has {len(row)} fields, not {len(COLUMNS)}")
        record: dict[str, Any] = {
            name: None if cell == NULL else cell for name, cell in zip(COLUMNS, row, strict=True)
        }
        if record["record"] == "checkpoint":
            record["event_id"] = record["id"]
        for name in _INTS:
            if record.get(name) is not None:
                record[name] = _int(number, name, record[name])
        yield number, record


def _int(number: int, name: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.lstrip("-").isdigit():
        return int(value)
    raise Malformed(f"line {number}: {name} must be a whole number, not {str(value)[:20]!r}")


def verify(lines: Iterable[str], publics: Sequence[ed25519.Ed25519PublicKey]) -> Report:
    """Check an export offline: every hash and link, every signature (each checkpoint with
    the key of `publics` it names), and the tail."""
    # cryptography loads here, when signatures are checked: not for every CLI command.
    from pipelines.audit import keys as audit_keys

    by_id = {audit_keys.key_id(public): public for public in publics}
    report = Report()
    hashes: dict[int, str] = {}
    signed: list[tuple[int, dict[str, Any]]] = []
    prev: str | None = None
    try:
        for number, record in records(lines):
            kind = record.get("record")
            if kind == "checkpoint":
                signed.append((number, record))
            elif kind == "event":
                problem = _check_event(number, record, report, prev)
                if problem:
                    report.problems.append(problem)
                    return report
                prev = hashes[record["id"]] = str(record["hash"])
            else:
                raise Malformed(f"line {number}: record must be event or checkpoint")
    except Malformed as exc:
        report.problems.append(str(exc))
        return report
    for number, record in signed:
        _check_checkpoint(number, record, report, hashes, by_id)
    if report.events == 0:
        report.problems.append("the export holds no events")
    return report


def _check_event(number: int, record: dict[str, Any], report: Report, prev: str | None) -> str:
    missing = [name for name in EVENT_FIELDS if name not in record]
    if missing:
        return f"line {number}: event without {', '.join(missing)}"
    fields = {name: record[name] for name in EVENT_FIELDS}
    for name in ("id", "attempt", "at"):
        fields[name] = _int(number, name, fields[name])
    event_id = fields["id"]
    if report.last_id is not None and event_id != report.last_id + 1:
        if event_id <= report.last_id:
            return f"line {number}: event {event_id} is out of order after event {report.last_id}"
        return f"event {report.last_id + 1} is missing (line {number} holds event {event_id})"
    if prev is None and event_id == 1 and fields["prev_hash"] != events.GENESIS:
        return f"line {number}: event 1 does not start the chain"
    if prev is not None and fields["prev_hash"] != prev:
        return f"line {number}: event {event_id} does not link to the event before it"
    if events.compute_hash(fields) != fields["hash"]:
        return f"line {number}: event {event_id} does not match its hash (edited)"
    report.first_id = event_id if report.first_id is None else report.first_id
    report.last_id = event_id
    report.events += 1
    return ""


def _check_checkpoint(
    number: int,
    record: dict[str, Any],
    report: Report,
    hashes: dict[int, str],
    by_id: dict[str, ed25519.Ed25519PublicKey],
) -> None:
    missing = [name for name in CHECKPOINT_FIELDS if record.get(name) is None]
    if missing:
        report.problems.append(f"line {number}: checkpoint without {', '.join(missing)}")
        return
    event_id, hash_ = _int(number, "event_id", record["event_id"]), str(record["hash"])
    signed_at = _int(number, "signed_at", record["signed_at"])
    message = checkpoints.message(event_id, hash_, signed_at)
    from pipelines.audit import keys as audit_keys

    kid = str(record["key_id"])
    public = by_id.get(kid)
    if public is None:
        report.unverified.append(
            f"line {number}: the checkpoint for event {event_id} names key {kid[:16]!r}, "
            f"which was not given (given: {', '.join(sorted(by_id)) or 'none'}); add its "
            "--public-key"
        )
        return
    if not audit_keys.check(public, message, str(record["signature"])):
        report.problems.append(
            f"line {number}: the checkpoint for event {event_id} is not signed by key {kid[:16]}"
        )
        return
    report.checkpoints += 1
    when = clock.from_ms(signed_at)
    if report.newest is None or event_id > report.newest[0]:
        report.newest = (event_id, when)
    last = report.last_id or 0
    if event_id > last:
        report.problems.append(
            f"the tail is cut: the export ends at event {last}, but a checkpoint signed at "
            f"{units.when_exact(when)} names event {event_id}"
        )
    elif event_id in hashes and hashes[event_id] != hash_:
        report.problems.append(f"event {event_id} differs from the one its checkpoint signed")
