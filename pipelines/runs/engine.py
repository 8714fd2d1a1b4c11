"""One tick of a pipeline: fetch, dedup, record, draft, and queue each draft for approval.

    engine = Engine(store, pipelines, client=httpclient.fetching(), drafter_for=...)
    report = await engine.tick("news", "schedule", now)

A source that fails fails alone: its reason goes into the run record and the other
sources still deliver. Each item's path is new -> drafting -> awaiting_approval, with
its approval card queued in the outbox in the same transaction as the last step; in
drafting it walks its pipeline's steps (pipelines/drafting/steps.py: triage, full text, draft).

Every tick also resumes the pipeline's items left in drafting by a crash (startup asks
for a run at once, see store/upkeep/startup.py): the drafter reuses an output the provider
already gave, drafts again under the same claim when no call was made, and holds the
item (the claim's one alert says what to run) when a call may have been charged and
left nothing. An exception in one item fails that item alone, with its reason, and the
run ends `error`; a store fault (errors.PASSING) is not the item's: it waits in
drafting, and a follow-up run takes it up once the store answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

import httpx

from pipelines import sources
from pipelines.config import spec
from pipelines.drafting import drafters, moves, steps
from pipelines.ground import logfields
from pipelines.runs import fulltext, intake
from pipelines.sources import articles, base
from pipelines.text import similarity
from store import backend, errors, items, outbox, payloads
from store.backends import text as store_text
from store.db import Store
from store.intake import runs, timetable
from store.items import Item
from store.items.machine import State

log = logging.getLogger(__name__)
#: The log line of a source that failed (a dry run says it in its report instead).
SOURCE_FAILED = "pipeline %s: source %s failed: %s"

#: Items drafted at once; their transactions share commits (group commit).
CONCURRENCY = 32
#: Earlier approved drafts the duplicate gate compares against, at most.
DUPLICATE_LOOKBACK = 500
#: New items a tick drafts when no setting says otherwise; the rest go to a follow-up run.
MAX_ITEMS_PER_TICK = 10_000

DrafterFactory = Callable[[spec.Pipeline], drafters.Drafter]
#: Which of a tick's new items it drafts, in the order given; the others stay new.
Selector = Callable[[list[Item]], list[Item]]


@dataclass(frozen=True)
class Trial:
    """How a dry run (pipelines/runs/trial.py) drafts, unlike a live run: only the new
    items `select` picks (`--limit`), its cards saying how long each article was."""

    select: Selector
    full_text_lengths: bool


@dataclass
class TickReport:
    run_id: int
    pipeline: str
    counts: runs.Counts = field(default_factory=runs.Counts)
    errors: list[str] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    #: Items left in drafting by a store fault; a follow-up run takes them up.
    waiting_for_store: int = 0

    @property
    def status(self) -> str:
        return "error" if self.errors else "ok"


class Engine:
    def __init__(
        self,
        store: Store,
        pipelines: dict[str, spec.Pipeline],
        *,
        client: httpx.AsyncClient,
        drafter_for: DrafterFactory | None = None,
        max_items_per_tick: int = MAX_ITEMS_PER_TICK,
        trial: Trial | None = None,
    ) -> None:
        if max_items_per_tick < 1:
            raise ValueError(f"max_items_per_tick must be at least 1, got {max_items_per_tick}")
        self.store = store
        self.pipelines = pipelines
        self.client = client
        self._drafter_for = drafter_for or drafters.TemplateDrafter
        #: The kind of store fault last logged for items left waiting (None: the store
        #: answered since), so that one episode is one log line, not one per item.
        self._store_fault: str | None = None
        #: Pipelines whose follow-up run could not be recorded while the store failed;
        #: the scheduler asks again at each pass (`ask_owed_runs`) until it can.
        self._owed_runs: set[str] = set()
        #: Items a tick of this engine is drafting now; any other item in drafting was
        #: left there by a crash (or an error) and the next tick resumes it.
        self._in_flight: set[int] = set()
        self.max_items_per_tick = max_items_per_tick
        #: A live run drafts all it fetched, a dry run what its Trial picks.
        self._trial = trial
        #: Set by park(): a clean stop has begun.
        self._parked = False
        #: Articles for sources with full_text, a few at once per host across ticks.
        self._articles = articles.Fetcher(client)

    def park(self) -> None:
        """Begin no more drafts (a clean stop): drafts already begun finish; the items not
        begun stay in new or drafting, and the next start's run takes them up."""
        self._parked = True

    async def tick(
        self, name: str, trigger: runs.Trigger, now: datetime, *, run_id: int | None = None
    ) -> TickReport:
        """Run one pipeline once and record the run with its counts and errors.

        `run_id` is a run the caller opened (the scheduler, with its claim); without
        one the tick opens its own, and Conflict says the pipeline is running already.
        """
        if run_id is None:
            run_id = await runs.start_run(self.store, name, trigger, now)
        report = TickReport(run_id, name)
        logfields.tag(pipeline=name, run=report.run_id)  # each run is a task of its own
        try:
            await self._run(report, now)
        except Exception as exc:
            if isinstance(exc, errors.PASSING):  # weather: run again once the store answers
                self._owed_runs.add(name)
            await self._abandon(report, exc, now)
            raise
        return report

    async def _abandon(self, report: TickReport, exc: Exception, now: datetime) -> None:
        """Close a run that crashed, so the pipeline's next run can start; if the store
        cannot take even that, the run's lease lapses and the sweep closes it."""
        text = store_text.clean(f"crashed: {type(exc).__name__}: {exc}")[:500]
        try:
            await runs.finish_run(self.store, report.run_id, "error", report.counts, text, now)
        except errors.StoreError as also:
            log.warning("run %s stays open until its lease lapses: %s", report.run_id, also)

    async def _run(self, report: TickReport, now: datetime) -> None:
        name = report.pipeline
        pipeline = self.pipelines[name]
        fetched = 0
        new_items: list[Item] = []
        for source in pipeline.sources:
            result = await self._fetch(pipeline, source, report)
            if result is None:
                continue
            fetched += len(result.items)
            created, problems = await intake.record(self.store, pipeline, source.scope, result, now)
            new_items += created
            report.errors += problems
        waiting = await self._waiting(name, now)
        left = await items.in_state(self.store, State.DRAFTING, name, limit=self.max_items_per_tick)
        orphans = [item for item in left if item.id not in self._in_flight]
        drafted, failed = await self._draft_all(pipeline, waiting, orphans, report, now)
        report.created = [item.id for item in new_items]
        filtered = sum(1 for item in new_items if item.state == State.FILTERED)
        report.counts = runs.Counts(
            fetched=fetched,
            new=len(new_items),
            drafted=drafted,
            failed=failed,
            filtered=filtered,
            skipped=report.counts.skipped,
        )
        await self._finish(report, now)

    async def _fetch(
        self, pipeline: spec.Pipeline, source: sources.SourceConfig, report: TickReport
    ) -> base.Fetched | None:
        """The source's answer, or None (its reason in the report) when it failed."""
        state = await timetable.source_state(self.store, pipeline.name, source.scope)
        try:
            return intake.storable(await sources.fetch(source, state, self.client))
        except base.SourceError as exc:
            log.warning(SOURCE_FAILED, pipeline.name, source.scope, exc)
            report.errors.append(f"source {source.scope}: {exc}")
            return None

    async def _waiting(self, name: str, now: datetime) -> list[Item]:
        """The new items this tick drafts, oldest first; past the cap, a follow-up run
        (persisted, so it survives a restart) drafts the rest at the scheduler's next pass."""
        cap = self.max_items_per_tick
        waiting = await items.in_state(self.store, State.NEW, name, limit=cap + 1)
        if len(waiting) > cap:
            log.info(
                "pipeline %s: more than %d new items; the rest go to a follow-up run", name, cap
            )
            await timetable.request_run(self.store, name, now)
        return waiting[:cap] if self._trial is None else self._trial.select(waiting[:cap])

    async def _draft_all(
        self,
        pipeline: spec.Pipeline,
        waiting: list[Item],
        orphans: list[Item],
        report: TickReport,
        now: datetime,
    ) -> tuple[int, int]:
        """Draft the new items and resume those a crash left in drafting.

        Returns (reached approval, failed); an item held for an operator is neither.
        """
        drafting = list(orphans)
        for first in range(0, len(waiting), intake.RECORD_CHUNK):
            if self._parked:
                break  # stopping: the rest stay new for the next start
            chunk = waiting[first : first + intake.RECORD_CHUNK]
            drafting += await self.store.write(moves.start_drafting, chunk, now)
        if orphans:
            log.info(
                "pipeline %s: resuming %d item(s) left in drafting", pipeline.name, len(orphans)
            )
        earlier = await self._approved_recently(pipeline, now)
        plan = steps.plan_of(self._drafter_for(pipeline))
        if fulltext.used([pipeline]):
            lengths = self._trial is not None and self._trial.full_text_lengths
            plan = plan.reading(fulltext.Reading(self._articles, pipeline, lengths))
        walked = plan.steps()  # triage, full text, draft: each item walks them in order
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(item: Item) -> bool | None:
            async with gate:
                if self._parked:
                    return None  # stopping: left in drafting for the next start
                with logfields.bound(item=item.id, attempt=item.attempt):
                    return await self._draft_one(pipeline, walked, item, earlier, report, now)

        self._in_flight.update(item.id for item in drafting)
        try:
            outcomes = await asyncio.gather(
                *(one(item) for item in drafting), return_exceptions=True
            )
        finally:
            self._in_flight.difference_update(item.id for item in drafting)
        for item, outcome in zip(drafting, outcomes, strict=True):
            if isinstance(outcome, errors.PASSING):  # failing it met the store's fault
                self._waits_for_store(report, item, outcome)
            elif isinstance(outcome, BaseException):  # not even failing it could be recorded
                log.error("item %s stays in drafting for the next tick: %r", item.id, outcome)
                report.errors.append(f"item {item.id}: not recorded ({outcome!r})"[:500])
        if report.waiting_for_store:
            self._owed_runs.add(pipeline.name)
            await self.ask_owed_runs(now)
        return outcomes.count(True), outcomes.count(False)

    def _waits_for_store(self, report: TickReport, item: Item, exc: Exception) -> None:
        """An item left in drafting by a store fault: one line per episode, at info (the
        store logs the fault itself, and the storage alarm tells the operators)."""
        report.waiting_for_store += 1
        kind = type(exc).__name__
        if self._store_fault == kind:
            log.debug("item %s waits in drafting for the store: %s", item.id, exc)
            return
        self._store_fault = kind
        log.info(
            "pipeline %s: items wait in drafting until the store answers again (%s: %s)",
            report.pipeline, kind, exc,
        )  # fmt: skip

    async def ask_owed_runs(self, now: datetime) -> None:
        """Ask for a run of each pipeline whose items wait for the store, so that they go
        on as soon as it answers; while it still fails, they stay owed (in memory)."""
        for name in sorted(self._owed_runs):
            try:
                await timetable.request_run(self.store, name, now)
            except errors.PASSING as exc:
                log.debug("pipeline %s: follow-up run not recorded yet: %s", name, exc)
                return
            self._owed_runs.discard(name)

    async def _draft_one(
        self,
        pipeline: spec.Pipeline,
        walked: tuple[steps.Step, ...],
        item: Item,
        earlier: similarity.Gate,
        report: TickReport,
        now: datetime,
    ) -> bool | None:
        """Draft one item already in drafting: True when it reached approval, False when
        it failed, None when it waits in drafting for an operator. Whatever goes wrong
        stays with this item; the others go on."""
        try:
            result = await steps.walk(walked, item, now)
            # CPU work that grows with the text: in a thread, so taps keep being answered.
            duplicate = (
                await asyncio.to_thread(earlier.find, result.text, _sources(item))
                if earlier
                else None
            )
            moved = await self.store.write(
                moves.to_approval, pipeline, item, result, duplicate, now
            )
            self._store_fault = None
            if not moved:
                log.info(
                    "item %s reached approval by another worker meanwhile; this draft is not used",
                    item.id,
                )
                return None
            log.debug("item %s drafted; its card is queued", item.id)
            return True
        except drafters.Parked as parked:
            log.debug("%s", parked)
            return None
        except drafters.Skipped as skipped:
            await self._skip(item, skipped, now)
            report.counts = dataclasses.replace(report.counts, skipped=report.counts.skipped + 1)
            return None
        except drafters.DraftWaits as held:
            # A held claim's own alert (queued once, as it became uncertain) names the item
            # and the reconcile-claim to run; a held triage is tried again each run.
            log.warning("item %s waits in drafting: %s", item.id, held)
            return None
        except drafters.DraftFailed as exc:
            await self._fail(item, exc, now)
            return False
        except errors.PASSING as exc:
            # Weather, not the item's fault: it waits in drafting, as after a crash, and
            # a reply already paid for is kept by the drafter (never paid for twice).
            self._waits_for_store(report, item, exc)
            return None
        except Exception as exc:  # a bug or a fault in this item alone: fail it, go on
            log.exception("pipeline %s: drafting item %s failed", pipeline.name, item.id)
            message = store_text.clean(f"{type(exc).__name__}: {exc}")[:500]
            failure = drafters.DraftFailed(message, reason="internal")
            report.errors.append(f"item {item.id}: internal: {message}")
            await self._fail(item, failure, now)
            return False

    async def _skip(self, item: Item, skipped: drafters.Skipped, now: datetime) -> None:
        """The triage's verdict ends the item skipped; the event gives score and reason."""
        try:
            await self.store.write(moves.skip, item, str(skipped), now)
        except (errors.Conflict, errors.IllegalTransition) as moved:
            log.warning("item %s not skipped: %s", item.id, moved)

    async def _fail(self, item: Item, exc: drafters.DraftFailed, now: datetime) -> None:
        try:
            await self.store.write(moves.fail, item, exc, now)
        except (errors.Conflict, errors.IllegalTransition) as moved:
            # Moved meanwhile (the SLA sweep, say): nothing is left here to fail.
            log.warning("item %s not failed: %s", item.id, moved)

    async def _approved_recently(self, pipeline: spec.Pipeline, now: datetime) -> similarity.Gate:
        """The duplicate gate over the drafts approved in the window, built in a thread."""
        since = now - timedelta(days=pipeline.dedup.duplicate_window_days)
        found = await items.approved_since(self.store, pipeline.name, since, DUPLICATE_LOOKBACK)
        earlier = [similarity.Earlier(a.item_id, a.text, frozenset({a.source_id})) for a in found]
        # Fingerprinting up to DUPLICATE_LOOKBACK drafts once per tick takes tens of ms.
        return await asyncio.to_thread(similarity.Gate, earlier)

    async def _finish(self, report: TickReport, now: datetime) -> None:
        status: Literal["ok", "error"] = "error" if report.errors else "ok"
        error_text = "; ".join(report.errors) or None
        counts = report.counts
        log.info(
            "run %d of %s ended %s: fetched %d, new %d, filtered %d, skipped %d, drafted %d, "
            "failed %d",
            report.run_id, report.pipeline, status, counts.fetched, counts.new,
            counts.filtered, counts.skipped, counts.drafted, counts.failed,
        )  # fmt: skip

        def unit(conn: backend.Conn) -> None:
            runs.finish_run_sync(conn, report.run_id, status, report.counts, error_text, now)
            if error_text:
                text = f"⚠️ run {report.run_id} of {report.pipeline} failed: {error_text}"
                outbox.alert_sync(
                    conn, payloads.Alert(text=text), now, key=f"run-failed:{report.run_id}"
                )

        try:
            await self.store.write(unit)
        except errors.Conflict as closed:
            # This worker was stopped (paused) past its run's lease, and another worker
            # closed the run: what it drafted meanwhile is recorded all the same.
            log.warning(
                "run %d was closed while this worker was stopped: %s", report.run_id, closed
            )


def _sources(item: Item) -> frozenset[str]:
    return frozenset({item.source_id})
