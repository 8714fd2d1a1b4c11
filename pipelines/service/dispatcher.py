"""The dispatch worker: carries approved drafts from the outbox to their destinations.

    handled = await dispatcher.run_once(store, pipelines, client, now)   # burst mode (tests)
    RuntimeConfig(..., workers=(dispatcher.worker,))                     # in the bot
    RuntimeConfig(..., workers=(dispatcher.make_worker(bot),))           # with telegram_channel

Each due `dispatch` row (queued by approval in the same transaction as `approved`)
runs approved -> dispatching, ONE attempt through `pipelines.dispatch`, then
dispatching -> dispatched with the row marked sent. A transient failure leaves the
item dispatching and the row pending until its next try (backoff, or the
destination's Retry-After); a permanent one, or MAX_ATTEMPTS transient ones, moves
the item to failed with the reason and queues an alert.

Every delivery carries the idempotency key of (pipeline, item, attempt, version). A
crash between the side effect and its commit leaves the row pending and the item
dispatching; the next run re-asserts dispatching (a no-op) and sends again with the
same key, so the destination can drop the duplicate. A replay is a new attempt, so
a new key.

A file or `none` destination finishes at once, so up to BEGUN_TOGETHER of its rows
move to dispatching in one transaction and are then written in order: one commit
starts them all, and their closing writes share commits too. A row that waits so
begun waits only for local writes; a crash leaves it dispatching like a row whose
call was under way, and it is sent after the restart. A network destination may
take its whole timeout, so each of its rows starts alone, just before its call
(a row waiting behind slow calls would meet its dispatching deadline).

Rows are claimed with a lease (outbox.claim_due), so workers sharing a store never
take the same row at once. The worker sleeps until a dispatch row commits
(outbox.wakeup) or the earliest pending row falls due, works through due rows back
to back, and waits only as long as a destination asks (its Retry-After) or the
row's backoff says. A row that
raises something unexpected is retried with backoff and, past MAX_ATTEMPTS, parked
(failed, its reason kept) while the rows after it go on; the operators are told once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timedelta
from typing import Any

import httpx

from pipelines import dispatch
from pipelines.approval import card_trail
from pipelines.config import spec
from pipelines.ground import logfields, waiting
from pipelines.service import seams, workers
from store import backend, drafts, errors, items, outbox, payloads
from store.backends import text as store_text
from store.db import Store
from store.intake import runs
from store.items import Item, machine
from store.items.machine import State

log = logging.getLogger(__name__)

#: The longest the worker sleeps without a wake-up (seconds): a safety net, since
#: every committed dispatch row wakes it and it knows when the next retry is due.
POLL_S = 60.0
#: Rows read per query; a full batch is followed at once by the next.
BATCH = 50
#: The name the worker runs under (its function's name), in logs, alerts and health.
NAME = "dispatcher"
#: How long claimed rows stay this worker's when the runtime does not say.
LEASE = timedelta(minutes=5)
#: Rows of a local destination (file, none) moved to dispatching in one transaction.
BEGUN_TOGETHER = 16
#: The destinations that finish without the network, whose rows may start together.
LOCAL = (dispatch.FileTarget, dispatch.NoneTarget)

Worker = Callable[[Any, asyncio.Event], Coroutine[Any, Any, None]]


async def run_once(
    store: Store,
    pipelines: Mapping[str, spec.Pipeline],
    client: httpx.AsyncClient,
    now: datetime,
    *,
    bot: Any = None,
    rng: random.Random | None = None,
    env: Mapping[str, str] | None = None,
    report: workers.Report | None = None,
    worker: str = runs.NOBODY,
    lease: timedelta = LEASE,
) -> int:
    """Claim the due dispatch rows for `worker` and work through them; returns how many.

    Each destination (pipeline) takes its rows in order, one at a time; destinations
    run side by side, so a slow or hanging one holds up only its own rows. Workers
    sharing the store claim disjoint rows; the rows of a worker that dies are taken
    again once their lease lapses.
    """
    rng = rng if rng is not None else random.Random()
    claimant = outbox.Claimant(worker, lease)
    rows = await outbox.claim_due(store, claimant, now, ["dispatch"], limit=BATCH)
    by_target: dict[str, list[outbox.Row]] = {}
    for row in rows:
        by_target.setdefault(row.target, []).append(row)

    async def unexpected(row: outbox.Row, exc: Exception) -> None:
        """A bug must not stop the others: the row is retried, then parked."""
        log.error("dispatch row %s failed unexpectedly", row.id, exc_info=exc)
        if report is not None:
            await report(NAME, exc, f"on dispatch row {row.id}")
        reason = f"unexpected {waiting.describe(exc)}"
        await _retry_or_fail(store, row, reason, None, now, rng)

    async def settle(row: outbox.Row, closing: asyncio.Task[None]) -> None:
        try:
            await closing
        except errors.Closed:
            raise
        except Exception as exc:
            await unexpected(row, exc)

    async def deliver(
        row: outbox.Row, started: Started, pipeline: spec.Pipeline | None
    ) -> Callable[[backend.Conn], None] | None:
        """Call the target of a started row: the unit that records its success, if it had one."""
        logfields.tag(outbox=row.id, item=row.item_id)  # for this destination's task, row by row
        if started is None:  # the row closed without a call (recorded already)
            return None
        if isinstance(started, Exception):  # starting it failed (rolled back alone)
            await unexpected(row, started)
            return None
        try:
            assert pipeline is not None  # a row of a pipeline not loaded does not start
            return await _send(
                store, pipeline.dispatch, row, *started, client, now, bot=bot, rng=rng, env=env
            )
        except errors.Closed:
            raise
        except Exception as exc:
            await unexpected(row, exc)
            return None

    async def drain(queue: list[outbox.Row]) -> None:
        # Rows reach their target one at a time and in order, each after its start
        # committed. The closing writes stay in flight while the next rows start, so
        # they usually share that commit (one fsync, not two); a crash before a
        # closing commit leaves its row in dispatching, as a crash during its call would.
        pipeline = pipelines.get(queue[0].target)
        together = BEGUN_TOGETHER if pipeline and isinstance(pipeline.dispatch, LOCAL) else 1
        closing: list[tuple[outbox.Row, asyncio.Task[None]]] = []
        try:
            for at in range(0, len(queue), together):
                chunk = queue[at : at + together]
                begun = await _begin(store, chunk, pipeline is not None, now)
                for row, task in closing:
                    await settle(row, task)
                closing = []
                for row, started in zip(chunk, begun, strict=True):
                    done = await deliver(row, started, pipeline)
                    if done is not None:
                        closing.append((row, asyncio.create_task(store.write(done))))
        finally:
            for row, task in closing:
                await settle(row, task)

    outcomes = await asyncio.gather(*map(drain, by_target.values()), return_exceptions=True)
    for outcome in outcomes:  # every destination finished first; then a store error escapes
        if isinstance(outcome, BaseException):
            raise outcome
    return len(rows)


#: A row's start: the item in dispatching and the draft to send; None when the row
#: closed without a call; the exception when starting it failed.
Started = tuple[Item, drafts.Draft] | Exception | None


async def _begin(
    store: Store, rows: list[outbox.Row], loaded: bool, now: datetime
) -> list[Started]:
    """Start each row (see `_begin_rows`) in one transaction; a row that raises is
    answered with its exception, so one bad row does not hold up the others.

    Rows rarely raise, so they start with no savepoint each (two statements a row): when
    one raises, its transaction is rolled back whole and each row starts again alone.
    A fault of the store (errors.PASSING) is no row's: it escapes."""
    try:
        started: list[Started] = await store.write(_begin_rows, rows, loaded, now)
        return started
    except errors.PASSING:
        raise
    except Exception as exc:
        if len(rows) == 1:
            return [exc]
    return [(await _begin(store, [row], loaded, now))[0] for row in rows]


def _begin_rows(
    conn: backend.Conn, rows: list[outbox.Row], loaded: bool, now: datetime
) -> list[Started]:
    """Move each row's item to dispatching (all in one statement) and read the drafts to
    send in one more; or, when a row has nothing to send, close it (and fail the item
    where that is the outcome) and answer None. A second row of one item finds it
    dispatching already, and is sent again with the same key."""
    jobs = [payloads.Dispatch.of(row) for row in rows]
    if not loaded:
        for row, job in zip(rows, jobs, strict=True):
            _unloaded(conn, row, job, now)
        return [None] * len(rows)
    asked = [
        items.Move(items.Seen(j.item_id, State.APPROVED, j.attempt, j.version),
                   State.DISPATCHING, "system", now)
        for j in jobs
    ]  # fmt: skip
    answers = items.apply(conn, asked)
    moved = [answer.item for answer in answers if isinstance(answer, items.Moved)]
    texts = drafts.get_many_sync(conn, [(item.id, item.version) for item in moved])
    started: list[Started] = []
    for row, job, answer in zip(rows, jobs, answers, strict=True):
        item = _started(conn, row, job, answer, now)
        if item is None:
            started.append(None)
        else:  # a draft not found is looked for again, to say so
            draft = texts.get((item.id, job.version))
            started.append((item, draft or drafts.get_sync(conn, item.id, job.version)))
    return started


async def _send(
    store: Store,
    target: dispatch.DispatchTarget,
    row: outbox.Row,
    item: Item,
    draft: drafts.Draft,
    client: httpx.AsyncClient,
    now: datetime,
    *,
    bot: Any,
    rng: random.Random,
    env: Mapping[str, str] | None,
) -> Callable[[backend.Conn], None] | None:
    """Call the row's target once and answer the unit that records the success (the
    caller writes it); None when the call failed (recorded already)."""
    attempt = item.attempt
    delivery = dispatch.Delivery.of(item, draft, attempt)
    # What a destination said (an error body, its id for the delivery) is kept as text
    # the store can hold: a NUL in it would fail the write on PostgreSQL.
    try:
        result = await dispatch.dispatch(target, delivery, client=client, bot=bot, env=env)
    except dispatch.TransientDispatchError as exc:
        error = store_text.clean(str(exc))
        await _retry_or_fail(store, row, error, exc.retry_after, now, rng, item)
        return None
    except dispatch.PermanentDispatchError as exc:
        await _fail(store, row, item, store_text.clean(str(exc)), now)
        return None
    detail = store_text.clean(result.detail)
    external_id = None if result.external_id is None else store_text.clean(result.external_id)

    def done(conn: backend.Conn) -> None:
        # One commit for the item, its row and the card's edit: no window where one is
        # recorded alone. The item as it began dispatching moves, the edit with it; a
        # move found made already (a crash after it) still queues the edit.
        edit = card_trail.dispatched_row(conn, item, detail, external_id)
        sent = items.Move(item, State.DISPATCHED, "system", now, reason=detail, effects=[edit])
        [answer] = items.apply(conn, [sent])
        if isinstance(answer, items.Refused):
            if answer.why != "repeat":
                raise answer.error()
            outbox.put_sync(conn, edit, now)
        outbox.mark_sent_sync(conn, row.id, external_id, now)

    return done


async def _retry_or_fail(
    store: Store,
    row: outbox.Row,
    error: str,
    retry_after: float | None,
    now: datetime,
    rng: random.Random,
    item: Item | None = None,
) -> None:
    tries = row.attempts + 1
    if tries >= dispatch.MAX_ATTEMPTS:
        reason = f"gave up after {tries} attempts: {error}"
        if item is None:
            await outbox.mark_failed(store, row.id, reason)
        else:
            await _fail(store, row, item, reason, now)
        return
    delay = max(dispatch.retry_delay(tries, rng), retry_after or 0.0)
    log.warning("dispatch row %s: %s; try %d in %.0f s", row.id, error, tries + 1, delay)
    await outbox.mark_retry(store, row.id, error, now + timedelta(seconds=delay))


def _unloaded(conn: backend.Conn, row: outbox.Row, job: payloads.Dispatch, now: datetime) -> None:
    """A row of a pipeline not loaded: closed, or its item failed saying why."""
    item = items.lock_sync(conn, job.item_id)
    if not _closed(conn, row, job, item, now):
        _fail_sync(conn, row, item, f"pipeline {row.target!r} is not loaded", now)


def _started(
    conn: backend.Conn,
    row: outbox.Row,
    job: payloads.Dispatch,
    answer: items.Moved | items.Refused,
    now: datetime,
) -> Item | None:
    """The item a row's move to dispatching started, or None when the row closed or
    waits (its floor); a refusal no row explains raises."""
    if isinstance(answer, items.Moved):
        return answer.item
    item = answer.item
    if item is None:
        raise answer.error()
    if _closed(conn, row, job, item, now):
        return None
    if answer.why == "throttled":
        # Not an attempt: the item re-entered dispatching moments ago (a crash loop).
        log.info("dispatch of item %s waits: %s", item.id, answer.detail)
        outbox.defer_sync(conn, row.id, answer.detail, now + machine.FLOOR)
        return None
    if answer.why != "repeat":
        raise answer.error()
    return item  # dispatching already, with this work: sent again with the same key


def _closed(
    conn: backend.Conn, row: outbox.Row, job: payloads.Dispatch, item: Item, now: datetime
) -> bool:
    """Close the row if its item (as locked) leaves it nothing to send; True if it did."""
    if item.attempt != job.attempt:
        outbox.mark_failed_sync(conn, row.id, f"stale: item is now at attempt {item.attempt}")
    elif item.state == State.DISPATCHED:
        # The item's own commit landed before a crash stopped the row's: close the row.
        outbox.mark_sent_sync(conn, row.id, None, now)
    elif item.state in (State.FAILED, State.BREACH):
        outbox.mark_failed_sync(conn, row.id, item.reason or f"item is {item.state}")
    elif item.state == State.AWAITING_APPROVAL:
        # The approval was undone after this row was claimed: nothing to send.
        outbox.mark_failed_sync(conn, row.id, "the approval was undone")
    else:
        return False
    return True


def _fail_sync(conn: backend.Conn, row: outbox.Row, item: Item, reason: str, now: datetime) -> None:
    """The item fails with the reason and an alert, and its row closes."""
    failed = f"dispatch: {reason}"
    items.apply_one(conn, items.Move(item, State.FAILED, "system", now, failed, any_version=True))
    text = f"❌ item {item.id} ({item.pipeline}) was not dispatched: {reason}"
    key = f"dispatch-failed:{item.id}:{item.attempt}:{item.version}"
    outbox.alert_sync(
        conn, payloads.Alert(text=text, item_id=item.id, pipeline=item.pipeline), now, key=key
    )
    card_trail.failed_sync(conn, item, reason, now)
    outbox.mark_failed_sync(conn, row.id, reason)


async def _fail(store: Store, row: outbox.Row, item: Item, reason: str, now: datetime) -> None:
    await store.write(_fail_sync, row, item, reason, now)


def make_worker(bot: Any = None, *, poll_s: float = POLL_S) -> Worker:
    """A RuntimeConfig worker that dispatches until stopped; `bot` serves telegram_channel."""

    async def dispatcher(runtime: seams.Dispatching, stop: asyncio.Event) -> None:
        rng = random.Random()
        woken = outbox.wakeup(runtime.store, ["dispatch"])
        while not stop.is_set():
            woken.clear()  # before reading, so a row committed meanwhile wakes the next wait
            handled = await run_once(
                runtime.store,
                runtime.pipelines,
                runtime.client,
                runtime.now(),
                bot=bot,
                rng=rng,
                report=runtime.workers.report,
                worker=runtime.me.id,
                lease=runtime.config.dispatch_lease,
            )
            if handled < BATCH:
                longest = outbox.longest_wait(runtime.store, poll_s)
                wait = await _until_next_due(runtime.store, runtime.now(), longest)
                await waiting.wait_any((woken, stop), wait)

    return dispatcher


async def _until_next_due(store: Store, now: datetime, longest: float) -> float:
    due = await outbox.next_due(store, ["dispatch"])
    return longest if due is None else min(max((due - now).total_seconds(), 0.0), longest)


#: The worker without a bot (every target but telegram_channel).
worker = make_worker()
