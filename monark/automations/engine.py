"""The engine: after a transaction commits, the enabled automations its record events trigger
run on the job queue (``monark.core.jobs``), never in the request that wrote them.

``after_flush`` notes the record events each flush writes (with the record's values as of
that flush), ``after_commit`` queues a job with them and ``after_rollback`` forgets them, so
an event that never commits never triggers anything. Inside a unit of work (the assistant's
tool calls) a session's commit only releases a SAVEPOINT, so the job is queued at the unit's
real commit (``monark.core.uow.on_commit``) and dropped if it rolls back.

The events are the outbox: written ``pending`` in the change's own transaction, settled once
their job ran. A job that was never queued (the process died after the commit, the queue's
storage was down) or died midway leaves them pending, and the periodic ``sweep`` runs them
(the record as it is then). Each run is claimed by a unique (automation, event) key as it
starts, so redeliveries, the sweep and racing workers run an automation once per event.
Writes made by a run's actions are part of its chain and run in the same job.

Tenancy: an event triggers only automations of its own org, whose actions run as
``Principal.for_automation`` in that org, within the owner's current rights
(``ownership``; an automation whose owner lapsed is switched off instead of run). Privacy:
a private record's event runs only automations opted in, confined to the record's readers
(``privacy``). Depth: events written by a run's actions carry
that run's depth; an event at ``AUTOMATION_MAX_DEPTH`` triggers a stored ``skipped`` run
instead of another execution, which stops an automation that retriggers itself. Breadth:
all the runs one change sets off, however they branch, share a budget of
``AUTOMATION_MAX_RUNS``; beyond it, runs are stored ``skipped`` too.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from time import perf_counter
from typing import Any

from flask import current_app
from sqlalchemy import event as sa_event
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from monark.automations import privacy
from monark.automations.actions import RunContext, StepFailed, StepWithheld
from monark.automations.graph import Graph, Node, parse_graph
from monark.automations.models import Automation, AutomationRun
from monark.automations.nodes import RECORD_EVENTS, REGISTRY
from monark.automations.ownership import Owner, install_ownership, owner_of, switch_off
from monark.automations.template import render
from monark.core import jobs
from monark.core.errors import AppError
from monark.core.events import follow, written_by_run
from monark.core.models import Event, utcnow
from monark.core.rbac import Principal
from monark.core.uow import on_commit
from monark.extensions import db
from monark.records.index import private_to
from monark.records.models import Record, RecordModel

log = logging.getLogger(__name__)

DEFAULT_MAX_DEPTH = 5
DEFAULT_MAX_RUNS = 50
PENDING = "monark.automation_triggers"
SWEEP_GRACE_SECONDS = 30.0  # younger pending events are most likely in a queued job
SWEEP_BATCH = 500
_depth: ContextVar[int] = ContextVar("automation_depth", default=0)
_cascade: ContextVar[int | None] = ContextVar("automation_cascade", default=None)
# Runs left for the cascade in progress (one list shared by its nested runs); None outside.
_budget: ContextVar[list[int] | None] = ContextVar("automation_budget", default=None)


@dataclass(frozen=True)
class Trigger:
    """What started a run: an event (or a test), its record and how deep the chain is."""

    type: str
    org_id: int
    model_key: str | None
    record_id: int | None = None
    values: dict[str, Any] = field(default_factory=dict)
    # Who alone may read the record (``records.index.private_to``): None for the org's.
    private_to: int | None = None
    event_id: int | None = None
    model_id: int | None = None
    fields: tuple[str, ...] = ()
    depth: int = 0  # depth of the run whose action wrote the event; 0 for people and keys
    # The first event of the change that started the chain (its runs share one budget).
    cascade_id: int | None = None
    # When the event was written: automations made after it do not run for it.
    occurred_at: datetime | None = None
    # A schedule's slot (UTC): its run claims (automation, slot) instead of an event.
    slot: datetime | None = None

    @property
    def private(self) -> bool:
        """Whether the record is private (its run is confined to its readers)."""
        return self.private_to is not None


# ---- collecting events ----------------------------------------------------------------


def _record_of(session: Any, record_id: int | None) -> Record | None:
    """The triggering record as this flush left it (no SQL: the session is mid-flush)."""
    record = session.identity_map.get(session.identity_key(Record, record_id))
    if record is None:  # deleted in this flush
        record = next(
            (o for o in session.deleted if isinstance(o, Record) and o.id == record_id), None
        )
    return record


def _collect(session: Any, _flush_context: Any) -> None:
    events = sorted(
        (o for o in session.new if isinstance(o, Event) and o.type in RECORD_EVENTS),
        key=lambda e: e.id,
    )
    if not events:
        return
    pending = session.info.setdefault(PENDING, [])
    for event in events:
        record = _record_of(session, event.subject_id)
        pending.append(
            Trigger(
                type=event.type,
                org_id=event.org_id,
                model_key=None,  # resolved by the runner
                record_id=event.subject_id,
                values=dict(record.values or {}) if record is not None else {},
                private_to=readers_of(record),
                event_id=event.id,
                model_id=(event.payload or {}).get("model_id"),
                fields=tuple((event.payload or {}).get("fields") or ()),
                depth=_depth.get(),
                cascade_id=_cascade.get(),
                occurred_at=event.created_at,
            )
        )


def _forget(session: Any, *_args: Any) -> None:
    session.info.pop(PENDING, None)


def _budget_left(app: Any, cascade_id: int | None) -> int:
    """Runs the chain of ``cascade_id`` may still set off: the limit, less the runs of that
    chain that earlier jobs executed (a job that died midway, taken up by the sweep)."""
    limit = int(app.config.get("AUTOMATION_MAX_RUNS", DEFAULT_MAX_RUNS))
    if cascade_id is None:
        return limit
    done = db.session.scalar(
        select(func.count(AutomationRun.id)).where(
            AutomationRun.cascade_event_id == cascade_id, AutomationRun.status != "skipped"
        )
    )
    return max(limit - int(done or 0), 0)


def _run_all(app: Any, triggers: list[Trigger]) -> None:
    # A change made by a person, key or assistant starts a cascade with a fresh budget; the
    # runs its actions set off (called back in here, nested) draw on the same one.
    token = None
    if _budget.get() is None:
        with app.app_context():
            left = _budget_left(app, triggers[0].cascade_id)
        token = _budget.set([left])
    try:
        for trigger in triggers:
            # The caller's transaction is committed: a failing run must never look like its
            # error. An event whose work failed before all its runs were claimed stays
            # pending: the sweep runs what is unclaimed.
            try:
                with app.app_context():
                    run_triggered(trigger, settle_event=True)
            except Exception:
                log.exception("automations for event %s failed to run", trigger.event_id)
    finally:
        if token is not None:
            _budget.reset(token)


def settle(event_id: int | None) -> None:
    """Mark an event's after-commit work done (it leaves the outbox)."""
    if event_id is None:
        return
    db.session.execute(update(Event).where(Event.id == event_id).values(pending=False))
    db.session.commit()


@jobs.job("automations.run_events")
def run_events(triggers: list[Trigger]) -> None:
    """The job queued after a commit: run what its record events trigger."""
    _run_all(current_app._get_current_object(), triggers)  # type: ignore[attr-defined]


@jobs.periodic("automations.sweep")
def sweep() -> int:
    """Run what committed events older than ``SWEEP_GRACE_SECONDS`` still wait for (their
    job was never queued, or died); how many events it took up. Claims keep runs single."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    cutoff = utcnow() - timedelta(seconds=SWEEP_GRACE_SECONDS)
    events = db.session.scalars(
        select(Event)
        .where(Event.pending.is_(True), Event.created_at <= cutoff)
        .order_by(Event.id)
        .limit(SWEEP_BATCH)
    ).all()
    triggers = [_trigger_of(event) for event in events]
    db.session.commit()  # end the read before the runs open their own
    for trigger in triggers:
        _run_all(app, [trigger])
    return len(triggers)


def _trigger_of(event: Event) -> Trigger:
    """The trigger of a stored event: its record as it is now, its chain from its run."""
    payload = event.payload or {}
    record = db.session.get(Record, event.subject_id) if event.subject_id else None
    depth, cascade_id = 0, event.id
    if (run_id := payload.get("run_id")) is not None:
        run = db.session.get(AutomationRun, run_id)
        if run is not None:
            depth, cascade_id = run.depth, run.cascade_event_id or event.id
    return Trigger(
        type=event.type,
        org_id=event.org_id,
        model_key=None,
        record_id=event.subject_id,
        values=dict(record.values or {}) if record is not None else {},
        private_to=readers_of(record),
        event_id=event.id,
        model_id=payload.get("model_id"),
        fields=tuple(payload.get("fields") or ()),
        depth=depth,
        cascade_id=cascade_id,
        occurred_at=event.created_at,
    )


def _enqueue(app: Any, triggers: list[Trigger]) -> None:
    # One change, one chain: its events share the budget, named by the first of them.
    cascade_id = min(t.event_id for t in triggers if t.event_id is not None)
    triggers = [replace(t, cascade_id=cascade_id) for t in triggers]
    try:
        run_events.enqueue(triggers, app=app)
    except Exception:
        # The write is committed and its events stay pending: the sweep runs them.
        log.warning("queue unavailable: events %s wait for the sweep", cascade_id, exc_info=True)


def _after_commit(session: Any) -> None:
    triggers = session.info.pop(PENDING, None)
    if not triggers:
        return
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    # A run's own writes belong to its chain and its job; anything else leaves the request.
    inside_a_run = _budget.get() is not None
    work = partial(_run_all if inside_a_run else _enqueue, app, triggers)
    # Inside a unit of work this commit only released a SAVEPOINT: wait for the real one.
    if not on_commit(work):
        work()


def install_engine() -> None:
    """Listen to every ORM session (Flask-SQLAlchemy's and units of work's), once per process."""
    follow(RECORD_EVENTS)
    for name, listener in (
        ("after_flush", _collect),
        ("after_commit", _after_commit),
        ("after_rollback", _forget),
    ):
        if not sa_event.contains(Session, name, listener):
            sa_event.listen(Session, name, listener)
    install_ownership()


# ---- running --------------------------------------------------------------------------


def run_triggered(trigger: Trigger, *, settle_event: bool = False) -> list[int]:
    """Run the org's enabled automations that ``trigger`` matches; the ids of their runs.

    ``settle_event``: the event leaves the outbox once every automation has its run
    claimed, in the last claim's own commit (one commit fewer per event), or on its own.
    """
    model_key = db.session.scalar(
        select(RecordModel.key).where(
            RecordModel.id == trigger.model_id, RecordModel.org_id == trigger.org_id
        )
    )
    if model_key is None:
        if settle_event:
            settle(trigger.event_id)
        return []
    automations = db.session.scalars(
        select(Automation)
        .where(
            Automation.org_id == trigger.org_id,
            Automation.enabled.is_(True),
            Automation.trigger_type == trigger.type,
            Automation.trigger_model == model_key,
            # Its job may run late: an automation made since was not there to be triggered.
            *([Automation.created_at <= trigger.occurred_at] if trigger.occurred_at else []),
        )
        .order_by(Automation.id)
    ).all()
    trigger = replace(trigger, model_key=model_key, private_to=_readers_now(trigger))
    max_depth = current_app.config.get("AUTOMATION_MAX_DEPTH", DEFAULT_MAX_DEPTH)
    budget = _budget.get()
    run_ids: list[int] = []
    owners: dict[int | None, Owner] = {}
    eligible: list[tuple[Automation, Owner]] = []
    for automation in automations:
        if not _fields_match(automation, trigger):
            continue
        if automation.owner_id not in owners:
            owners[automation.owner_id] = owner_of(db.session, automation)
        owner = owners[automation.owner_id]
        if owner.lapse:  # missed when the owner's rights changed: switched off now
            switch_off(automation, owner)
            db.session.commit()
            continue
        if not admits(automation, owner, trigger):
            continue  # a private record it may not run for: no run, nothing stored
        eligible.append((automation, owner))
    settled = not settle_event
    for index, (automation, owner) in enumerate(eligible):
        last = index == len(eligible) - 1
        settles = trigger.event_id if last and not settled else None
        if trigger.depth >= max_depth:
            reason = (
                f"Not run: this event was written by a chain of {trigger.depth} automation "
                f"runs, and the limit is {max_depth} (an automation that retriggers itself "
                "stops here)."
            )
            claimed = _claimed(run_ids, _skip, automation, trigger, reason, settles=settles)
        elif budget is not None and budget[0] <= 0:
            limit = current_app.config.get("AUTOMATION_MAX_RUNS", DEFAULT_MAX_RUNS)
            reason = (
                f"Not run: the change that started this chain already set off {limit} "
                "automation runs, the limit for one change."
            )
            claimed = _claimed(run_ids, _skip, automation, trigger, reason, settles=settles)
        else:
            if budget is not None:
                budget[0] -= 1
            claimed = _claimed(run_ids, execute, automation, trigger, owner, settles=settles)
            if not claimed and budget is not None:
                budget[0] += 1  # another worker runs it, and counts it
        settled = settled or (settles is not None and claimed)
    if not settled:
        settle(trigger.event_id)
    return run_ids


class AlreadyClaimed(Exception):
    """Another job (a redelivery, the sweep, another worker) has this event's run."""


def _claimed(run_ids: list[int], start: Any, *args: Any, **kwargs: Any) -> bool:
    """Call ``start`` (``execute`` or ``_skip``), adding its run to ``run_ids``; False when
    the run was claimed elsewhere first."""
    try:
        run_ids.append(start(*args, **kwargs))
    except AlreadyClaimed:
        return False
    return True


def admits(automation: Automation, owner: Owner, trigger: Trigger) -> bool:
    """Whether ``automation`` may run for the trigger's record (``privacy.runs_for``)."""
    owner_principal = owner.principal(automation.org_id)
    return privacy.runs_for(automation.private_records, owner_principal, trigger.private_to)


def readers_of(record: Record | None) -> int | None:
    """``Trigger.private_to`` of a record (None for none)."""
    return private_to(record.visibility, record.creator_id) if record is not None else None


def _readers_now(trigger: Trigger) -> int | None:
    """Who may read the trigger's record: as its event saw it, or as it is now when it was
    made private since (the stricter of the two)."""
    if trigger.private_to is not None or trigger.record_id is None:
        return trigger.private_to
    now = db.session.execute(
        select(Record.visibility, Record.creator_id).where(
            Record.id == trigger.record_id, Record.org_id == trigger.org_id
        )
    ).first()
    return private_to(now.visibility, now.creator_id) if now is not None else None


def _fields_match(automation: Automation, trigger: Trigger) -> bool:
    if trigger.type != "record.updated":
        return True
    node = next((n for n in automation.graph.get("nodes", []) if n.get("type") == trigger.type), {})
    wanted = set((node.get("config") or {}).get("fields") or ())
    return not wanted or bool(wanted & set(trigger.fields))


def _new_run(
    automation: Automation, trigger: Trigger, settles: int | None = None, **extra: Any
) -> int:
    """Store and claim a run (``_claim``); its id."""
    run = AutomationRun(
        org_id=automation.org_id,
        automation_id=automation.id,
        automation_version=automation.version,
        trigger_type=automation.trigger_type,
        trigger_event_id=trigger.event_id,
        record_id=trigger.record_id,
        private_to=trigger.private_to,
        depth=trigger.depth + 1,
        cascade_event_id=trigger.cascade_id,
        slot_at=trigger.slot,
        **extra,
    )
    db.session.add(run)
    if settles is not None:  # the event's last claim: it leaves the outbox with it
        db.session.execute(update(Event).where(Event.id == settles).values(pending=False))
    db.session.flush()
    run_id = run.id  # read before the commit expires it (no query to read it back)
    _claim()
    return run_id


def _claim() -> None:
    """Commit a new run: for an event (or a schedule's slot), the unique (automation, event)
    (or (automation, slot)) key lets one commit win, whatever the redeliveries or workers;
    the others raise ``AlreadyClaimed``."""
    try:
        db.session.commit()
    except IntegrityError as err:
        db.session.rollback()
        raise AlreadyClaimed from err


def _skip(automation: Automation, trigger: Trigger, reason: str, settles: int | None = None) -> int:
    return _new_run(
        automation, trigger, settles, status="skipped", finished_at=utcnow(), error=reason
    )


def skip(automation: Automation, trigger: Trigger, reason: str) -> int | None:
    """Store a skipped run saying ``reason``; None when its key was claimed elsewhere."""
    try:
        return _skip(automation, trigger, reason)
    except AlreadyClaimed:
        return None


def start_chain(automation: Automation, trigger: Trigger, owner: Owner) -> int | None:
    """Run ``automation`` as a change of its own (a schedule's slot): the runs its actions
    set off run in this job, within one budget of ``AUTOMATION_MAX_RUNS``; the run's id,
    or None when another worker claimed it first."""
    limit = int(current_app.config.get("AUTOMATION_MAX_RUNS", DEFAULT_MAX_RUNS))
    token = _budget.set([max(limit - 1, 0)])
    try:
        return execute(automation, trigger, owner)
    except AlreadyClaimed:
        return None
    finally:
        _budget.reset(token)


def execute(
    automation: Automation,
    trigger: Trigger,
    owner: Owner,
    *,
    is_test: bool = False,
    started_by_id: int | None = None,
    settles: int | None = None,
) -> int:
    """Run one automation's graph for ``trigger`` and store the run with its steps.

    Its actions act within ``owner``'s current role, and for a private record confined to
    that record's readers (``privacy``). ``settles``: the event whose outbox row its claim
    settles.
    """
    graph, _ = parse_graph(automation.graph, REGISTRY)
    depth = trigger.depth + 1
    record = {**trigger.values, "id": trigger.record_id} if trigger.model_key else {}
    ctx = RunContext(
        principal=Principal.for_automation(
            automation.id,
            automation.org_id,
            owner.role,
            confined_to=trigger.private_to,
        ),
        automation_id=automation.id,
        trigger_model=trigger.model_key,
        values={
            "record": record,
            "trigger": {
                "type": trigger.type,
                "model": trigger.model_key,
                "event_id": trigger.event_id,
                **({"slot": trigger.slot.isoformat()} if trigger.slot else {}),
            },
            "automation": {"id": automation.id, "name": automation.name},
            "nodes": {},
        },
        allow_private_webhooks=bool(current_app.config.get("AUTOMATION_WEBHOOK_ALLOW_PRIVATE")),
        sends_private=automation.private_records == privacy.PrivateRecords.SEND,
    )
    # Claimed once what the run reads of the automation is read (the claim's commit
    # expires it).
    run_id = _new_run(automation, trigger, settles, is_test=is_test, started_by_id=started_by_id)
    token = _depth.set(depth)
    chain = _cascade.set(trigger.cascade_id)
    try:
        with written_by_run(run_id):
            steps = _walk(graph, ctx)
    finally:
        _cascade.reset(chain)
        _depth.reset(token)
    failed = [s["node_id"] for s in steps if s["status"] == "failed"]
    db.session.execute(
        update(AutomationRun)
        .where(AutomationRun.id == run_id)
        .values(
            steps=steps,
            status="failed" if failed else "succeeded",
            error=f"Failed at {', '.join(failed)}." if failed else None,
            finished_at=utcnow(),
        )
    )
    db.session.commit()
    return run_id


def _error_text(err: Exception) -> str:
    if isinstance(err, AppError):
        details = "; ".join(f"{d.get('field')}: {d.get('message')}" for d in err.details)
        return f"{err.message} {details}".strip()
    if isinstance(err, StepFailed):
        return str(err)
    return f"Unexpected error ({type(err).__name__})."


def _run_node(node: Node, ctx: RunContext) -> tuple[str, Any, str | None]:
    """Execute one node: (status, output, error). A node's failure is its step's, only;
    a node withheld by the privacy rule is ``withheld``, its error the reason."""
    try:
        return "succeeded", node.node_type.run(node.config, ctx), None
    except StepWithheld as err:
        db.session.rollback()
        return "withheld", None, str(err)
    except Exception as err:  # the step boundary: any failure becomes the step's error
        db.session.rollback()
        if not isinstance(err, AppError | StepFailed):
            log.exception("automation %s node %s failed", ctx.automation_id, node.id)
        return "failed", None, _error_text(err)


def _skip_reason(graph: Graph, node_id: str, status: dict[str, str]) -> str:
    sources = [status.get(e.source) for e in graph.incoming(node_id)]
    if any(state in ("failed", "blocked") for state in sources):
        return "An earlier step failed."
    if "withheld" in sources:
        return "Not reached: an earlier step was not run for this private record."
    return "Not reached: a condition before it did not let the run through."


def _walk(graph: Graph, ctx: RunContext) -> list[dict[str, Any]]:
    """Run the nodes in order; a node runs when an edge into it fired.

    Each step is ``{"node_id", "type", "status", "input", "output", "error", "reason",
    "started_at", "duration_ms"}``; ``reason`` says why a skipped node did not run.
    """
    steps: list[dict[str, Any]] = []
    fired: set[int] = set()
    status: dict[str, str] = {}  # "blocked": skipped because something before it failed
    for node_id in graph.order():
        node = graph.nodes[node_id]
        started, clock = utcnow(), perf_counter()
        step: dict[str, Any] = {"node_id": node_id, "type": node.type_key, "input": None}
        output, error, reason = None, None, None
        if node is graph.trigger and (slot := ctx.values["trigger"].get("slot")):
            state, output = "succeeded", {"slot": slot}
        elif node is graph.trigger:
            state, output = "succeeded", {"record_id": ctx.values["record"].get("id")}
        elif not any(e.index in fired for e in graph.incoming(node_id)):
            state, reason = "skipped", _skip_reason(graph, node_id, status)
        else:
            step["input"] = render(node.raw_config, ctx.values)
            state, output, error = _run_node(node, ctx)
        status[node_id] = "blocked" if reason == "An earlier step failed." else state
        if state == "withheld":  # stored as skipped, with why
            state, reason, error = "skipped", error, None
        ctx.values["nodes"][node_id] = output or {}
        if state == "succeeded":
            fired |= {
                e.index
                for e in graph.outgoing(node_id)
                if e.when is None or e.when == bool((output or {}).get("matched"))
            }
        step |= {
            "status": state,
            "output": output,
            "error": error,
            "reason": reason,
            "started_at": started.isoformat(),
            "duration_ms": round((perf_counter() - clock) * 1000, 1),
        }
        steps.append(step)
    return steps
