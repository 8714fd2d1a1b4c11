"""What the operator reads: pipelines at a glance, runs, pending items, history, audit."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from pipelines.operations import dropped
from pipelines.operations.inputs import Invalid
from pipelines.providers import pace
from pipelines.service import workers
from pipelines.voice import sidecar
from store import drafts, items
from store.audit import events
from store.backends import writer
from store.db import Store
from store.intake import runs, timetable
from store.items import machine
from store.items.machine import State
from store.ledger import reporting as ledger_report

#: Items /pending and `gatehouse pending` list at most (oldest first).
PENDING_LIMIT = 50
#: Uncertain holds /status counts at most (the /budget reply lists them).
UNCERTAIN_COUNTED = 50
#: Runs /status <pipeline> and `gatehouse runs` show by default.
RUNS_SHOWN = 10


@dataclass(frozen=True)
class PipelineStatus:
    name: str
    paused: bool
    next_due_at: datetime | None
    last_run: runs.Run | None
    awaiting: int
    breaches: int
    #: False for a pipeline the store knows but no pipeline file declares today: its
    #: items still wait, and nothing will run it.
    has_file: bool = True


@dataclass(frozen=True)
class Overview:
    at: datetime
    pipelines: list[PipelineStatus]
    wal_bytes: int
    #: The writer's current storage fault (disk full, I/O error); None while writes succeed.
    storage: writer.StorageFault | None = None
    #: The running process's supervised workers (empty when asked from another process).
    worker_states: Sequence[workers.State] = ()
    #: AI spend holds waiting for an operator's settlement (at most UNCERTAIN_COUNTED).
    uncertain_holds: int = 0
    #: Each model's pace in the running process (empty when it was not asked).
    models: Sequence[pace.Snapshot] = ()

    @property
    def workers_down(self) -> list[workers.State]:
        """Workers that should run and do not (one on standby in a follower is well)."""
        return workers.down(self.worker_states)


async def overview(
    store: Store,
    pipelines: Collection[str],
    now: datetime,
    worker_states: Sequence[workers.State] = (),
    models: Sequence[pace.Snapshot] = (),
) -> Overview:
    """Every pipeline configured or in the store: last run, next due, paused, awaiting
    and breached items. A pipeline whose file is gone stays listed (its items wait)."""
    states = await timetable.all_states(store)
    known = sorted(set(pipelines) | set(states))
    counts = await items.counts(store, known, (State.AWAITING_APPROVAL, State.BREACH))
    rows = []
    for name in known:
        state = states.get(name)
        last = await runs.recent_runs(store, name, 1)
        by_state = counts.get(name, {})
        rows.append(
            PipelineStatus(
                name=name,
                paused=state.paused if state else False,
                next_due_at=state.next_due_at if state else None,
                last_run=last[0] if last else None,
                awaiting=by_state.get(State.AWAITING_APPROVAL, 0),
                breaches=by_state.get(State.BREACH, 0),
                has_file=name in pipelines,
            )
        )
    uncertain = len(await ledger_report.uncertain(store, UNCERTAIN_COUNTED))
    return Overview(
        now,
        rows,
        store.wal_bytes(),
        store.faults.current,
        worker_states,
        uncertain_holds=uncertain,
        models=models,
    )


@dataclass(frozen=True)
class PipelineRuns:
    name: str
    recent: list[runs.Run]
    #: The last green run and the first red one after it: where to start looking.
    window: runs.Window
    #: Entries its filter dropped today (UTC) and not replayed since.
    filtered_today: int = 0
    #: Entries its triage skipped today (UTC) and not replayed since.
    skipped_today: int = 0


async def pipeline_runs(
    store: Store, name: str, now: datetime, n: int = RUNS_SHOWN
) -> PipelineRuns:
    """One pipeline's last n runs (newest first), its investigation window, and what its
    filter dropped today."""
    if n < 1:
        raise Invalid(f"the number of runs must be at least 1, not {n}")
    recent = await runs.recent_runs(store, name, n)
    window = await runs.investigation_window(store, name)
    filtered = await dropped.filtered_today(store, name, now)
    skipped = await dropped.skipped_today(store, name, now)
    return PipelineRuns(name, recent, window, filtered, skipped)


async def pending(store: Store, limit: int = PENDING_LIMIT) -> list[items.Item]:
    """Items awaiting approval, the longest-waiting first."""
    return await items.in_state(store, State.AWAITING_APPROVAL, limit=limit)


@dataclass(frozen=True)
class History:
    item: items.Item
    events: list[events.Event]
    #: The tells line of the item's newest version ("": none, or nothing drafted yet).
    tells: str = ""

    @property
    def dropped(self) -> bool:
        return self.item.state in machine.DROPPED


async def history(store: Store, item_id: int) -> History:
    """The item and its events, oldest first, and its newest version's tells; NotFound for
    an unknown id."""
    item = await items.get(store, item_id)
    newest = (item_id, item.version)
    found = await store.read(drafts.get_many_sync, [newest]) if item.version else {}
    tells = sidecar.line(found[newest].tells) if newest in found else ""
    return History(item, await events.for_entity(store, "item", item_id), tells)


async def audit(store: Store, signature: events.SignatureCheck | None = None) -> events.ChainReport:
    """Recompute the event hash chain (and, with `signature`, check the newest signed
    checkpoint's signature); the first broken link, if any, is named."""
    return await events.verify_chain(store, signature)
