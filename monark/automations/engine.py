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
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from monark.automations import notices, privacy, webhooks
from monark.automations.actions import RunContext, StepFailed, StepWaiting, StepWithheld
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
from monark.core.uow import listen_once, on_commit
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
            # error. An event whose work failed stays pending: the sweep tries it again.
            try:
                with app.app_context():
                    run_triggered(trigger)
                    settle(trigger.event_id)
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
    # An event whose runs keep failing to start is given up at the cap, not swept forever.
    cap = int(current_app.config["AUTOMATION_SWEEP_ATTEMPTS"])
    given_up = [e.id for e in events if e.sweeps >= cap]
    if given_up:
        log.error("events %s given up after %s sweeps", given_up, cap)
        db.session.execute(update(Event).where(Event.id.in_(given_up)).values(pending=False))
    events = [e for e in events if e.sweeps < cap]
    if events:
        db.session.execute(
            update(Event)
            .where(Event.id.in_([e.id for e in events]))
            .values(sweeps=Event.sweeps + 1)
            .execution_options(synchronize_session=False)
        )
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
    listen_once(
        Session,
        (("after_flush", _collect), ("after_commit", _after_commit), ("after_rollback", _forget)),
    )
    install_ownership()


# ---- running --------------------------------------------------------------------------


def run_triggered(trigger: Trigger) -> list[int]:
    """Run the org's enabled automations that ``trigger`` matches; the ids of their runs."""
    model_key = db.session.scalar(
        select(RecordModel.key).where(
            RecordModel.id == trigger.model_id, RecordModel.org_id == trigger.org_id
        )
    )
    if model_key is None:
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
    run_ids = []
    owners: dict[int | None, Owner] = {}
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
        if trigger.depth >= max_depth:
            reason = (
                f"Not run: this event was written by a chain of {trigger.depth} automation "
                f"runs, and the limit is {max_depth} (an automation that retriggers itself "
                "stops here)."
            )
            _claimed(run_ids, _skip, automation, trigger, reason)
        elif budget is not None and budget[0] <= 0:
            limit = current_app.config.get("AUTOMATION_MAX_RUNS", DEFAULT_MAX_RUNS)
            reason = (
                f"Not run: the change that started this chain already set off {limit} "
                "automation runs, the limit for one change."
            )
            _claimed(run_ids, _skip, automation, trigger, reason)
        else:
            if budget is not None:
                budget[0] -= 1
            if not _claimed(run_ids, execute, automation, trigger, owner) and budget is not None:
                budget[0] += 1  # another worker runs it, and counts it
    return run_ids


class AlreadyClaimed(Exception):
    """Another job (a redelivery, the sweep, another worker) has this event's run."""


def _claimed(run_ids: list[int], start: Any, *args: Any) -> bool:
    """Call ``start`` (``execute`` or ``_skip``), adding its run to ``run_ids``; False when
    the run was claimed elsewhere first."""
    try:
        run_ids.append(start(*args))
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


def _new_run(automation: Automation, trigger: Trigger, **extra: Any) -> AutomationRun:
    if extra.get("status") != "skipped":
        extra |= {"lease_until": _lease_end(), "context": _context_of(automation, trigger)}
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
    _claim()
    return run


def _claim() -> None:
    """Commit a new run: for an event, the unique (automation, event) key lets one commit
    win, whatever the redeliveries or workers; the others raise ``AlreadyClaimed``."""
    try:
        db.session.commit()
    except IntegrityError as err:
        db.session.rollback()
        raise AlreadyClaimed from err


def _skip(automation: Automation, trigger: Trigger, reason: str) -> int:
    run = _new_run(automation, trigger, status="skipped", finished_at=utcnow(), error=reason)
    return run.id


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


def _lease_end() -> datetime:
    """Until when a worker holds a run it renews now."""
    return utcnow() + timedelta(seconds=float(current_app.config["AUTOMATION_RUN_LEASE_SECONDS"]))


def _context_of(automation: Automation, trigger: Trigger) -> dict[str, Any]:
    """What a run's steps read, kept while it is open (so a run that waits for a webhook,
    or was cut off between steps, goes on from where it stood)."""
    record = {**trigger.values, "id": trigger.record_id} if trigger.model_key else {}
    return {
        "record": record,
        "trigger": {
            "type": trigger.type,
            "model": trigger.model_key,
            "event_id": trigger.event_id,
            **({"slot": trigger.slot.isoformat()} if trigger.slot else {}),
        },
        "automation": {"id": automation.id, "name": automation.name},
        "trigger_model": trigger.model_key,
    }


def execute(
    automation: Automation,
    trigger: Trigger,
    owner: Owner,
    *,
    is_test: bool = False,
    started_by_id: int | None = None,
) -> int:
    """Run one automation's graph for ``trigger`` and store the run with its steps.

    Its actions act within ``owner``'s current role, and for a private record confined to
    that record's readers (``privacy``). A run that reaches a webhook waits for it
    (``queued``, then ``retrying``) and goes on when it ends (``resume``).
    """
    run = _new_run(automation, trigger, is_test=is_test, started_by_id=started_by_id)
    _advance(run, automation, owner, {})
    return run.id


def _advance(
    run: AutomationRun, automation: Automation, owner: Owner, done: dict[str, dict[str, Any]]
) -> None:
    """Walk the run's graph on from the steps ``done`` in an earlier pass, and store where
    it stands: finished, or waiting for a webhook."""
    graph, _ = parse_graph(automation.graph, REGISTRY)
    run_id, depth = run.id, run.depth
    context = dict(run.context or {})
    ctx = RunContext(
        principal=Principal.for_automation(
            automation.id,
            automation.org_id,
            owner.role,
            confined_to=run.private_to,
        ),
        automation_id=automation.id,
        trigger_model=context.get("trigger_model"),
        values={
            "record": context.get("record") or {},
            "trigger": context.get("trigger") or {},
            "automation": context.get("automation") or {},
            "nodes": {},
        },
        allow_private_webhooks=bool(current_app.config.get(webhooks.PRIVATE_SETTING)),
        sends_private=automation.private_records == privacy.PrivateRecords.SEND,
        run_id=run_id,
        send_webhook=partial(_send_webhook, inline=run.is_test),
        heartbeat=partial(_heartbeat, run_id),
    )
    token = _depth.set(depth)
    chain = _cascade.set(run.cascade_event_id)
    try:
        with written_by_run(run_id):
            steps = _walk(graph, ctx, done)
    finally:
        _cascade.reset(chain)
        _depth.reset(token)
    run = db.session.get(AutomationRun, run_id)
    run.steps = steps
    run.lease_until = None
    waiting = [s["output"]["delivery_id"] for s in steps if _waits_on_delivery(s)]
    if waiting:
        retried = webhooks.waiting_for([run_id]).get(run_id)
        run.status = "retrying" if retried is not None and retried.attempts else "queued"
        db.session.commit()
        # A delivery that ended while this pass ran found the run busy: go on with it now.
        if any(webhooks.step_outcome(d)[0] != WAITING for d in waiting):
            resume(run_id)
        return
    failed = [s["node_id"] for s in steps if s["status"] == "failed"]
    run.status = "failed" if failed else "succeeded"
    run.error = f"Failed at {', '.join(failed)}." if failed else None
    run.finished_at = utcnow()
    run.context = None
    notices.run_ended(run, automation)
    db.session.commit()


WAITING = "waiting"


def _waits_on_delivery(step: dict[str, Any]) -> bool:
    return step["status"] == WAITING and "delivery_id" in (step.get("output") or {})


def _send_webhook(url: str, payload: Any, timeout: float, ctx: RunContext, *, inline: bool):
    """A run's webhook: stored as a delivery and queued (a test run's first try made at
    once); what its step says now (``webhooks.step_outcome``)."""
    delivery = webhooks.queue_delivery(
        ctx.run_id, ctx.automation_id, ctx.node_id, url, payload, timeout
    )
    if inline:
        webhooks.attempt_inline(delivery.id)
    else:
        webhooks.enqueue(delivery.id)
    return webhooks.step_outcome(delivery.id)


def _heartbeat(run_id: int, steps: list[dict[str, Any]]) -> None:
    """Renew the run's lease before an action, with the steps so far (the last one the
    action about to run): what ``leases.settle`` reads if this worker dies.

    Not committed here: it commits with the action's own first commit (and is rolled back
    with it), so a stored "running" step means that action may have written something,
    and its absence that it wrote nothing, which makes a run cut off then safe to go on.
    """
    db.session.execute(
        update(AutomationRun)
        .where(AutomationRun.id == run_id, AutomationRun.status == "running")
        .values(lease_until=_lease_end(), steps=steps)
        .execution_options(synchronize_session=False)
    )


def resume(run_id: int) -> bool:
    """Go on with a run that waited (for a webhook, or after its worker died between
    steps): claimed by one conditional update, so one worker alone walks it on. Whether
    this call did."""
    claimed = db.session.execute(
        update(AutomationRun)
        .where(
            AutomationRun.id == run_id,
            AutomationRun.status.in_(["queued", "retrying"]),
            AutomationRun.context.is_not(None),
        )
        .values(status="running", lease_until=_lease_end())
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
    if claimed.rowcount != 1:
        return False
    run = db.session.get(AutomationRun, run_id)
    db.session.refresh(run)
    automation = db.session.get(Automation, run.automation_id)
    owner = owner_of(db.session, automation)
    stop = None
    if automation.version != run.automation_version:
        stop = "Not continued: the automation was changed while this run waited."
    elif owner.lapse:  # its owner lost the right meanwhile: nothing more runs
        switch_off(automation, owner)
        stop = owner.reason()
    if stop is not None:
        run.status, run.error, run.finished_at = "failed", stop, utcnow()
        run.context, run.lease_until = None, None
        notices.run_ended(run, automation)
        db.session.commit()
        return True
    done = {s["node_id"]: s for s in run.steps or [] if s["status"] not in (WAITING, "running")}
    done |= {s["node_id"]: s for s in run.steps or [] if _waits_on_delivery(s)}
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    # What its later steps write belongs to its chain, whose budget the database counts.
    budget = _budget.set([_budget_left(app, run.cascade_event_id)])
    try:
        _advance(run, automation, owner, done)
    finally:
        _budget.reset(budget)
    return True


@jobs.job("automations.resume_run")
def resume_job(run_id: int) -> None:
    """The job that goes on with a run (``resume``)."""
    resume(run_id)


webhooks.on_delivery_end(resume)


STALE_CONFIG = (
    "This step's settings break a rule added since the automation was saved: open it, fix "
    "what Save points out, and save it again."
)


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
    if node.config is None:  # saved before a rule it breaks (a host name DNS cannot carry)
        return "failed", None, STALE_CONFIG
    try:
        return "succeeded", node.node_type.run(node.config, ctx), None
    except StepWithheld as err:
        db.session.rollback()
        return "withheld", None, str(err)
    except StepWaiting as err:  # a webhook: its delivery decides the step
        return WAITING, {"delivery_id": err.delivery_id}, None
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


WAITS = "Waits for the webhook before it."


def _replayed(step: dict[str, Any]) -> str:
    """The walk's state of a step stored by an earlier pass."""
    if step["status"] == "skipped" and step.get("input") is not None:
        return "withheld"  # it was reached, and the privacy rule kept it from running
    if step.get("reason") == "An earlier step failed.":
        return "blocked"
    return step["status"]


def _walk(
    graph: Graph, ctx: RunContext, done: dict[str, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Run the nodes in order; a node runs when an edge into it fired.

    Each step is ``{"node_id", "type", "status", "input", "output", "error", "reason",
    "started_at", "duration_ms"}``; ``reason`` says why a skipped node did not run. ``done``
    holds the steps an earlier pass of this run stored: they are not run again (a webhook's
    step reads its delivery). A node after a webhook that has not ended is ``waiting``.
    """
    done = done or {}
    steps: list[dict[str, Any]] = []
    fired: set[int] = set()
    status: dict[str, str] = {}  # "blocked": skipped because something before it failed
    for node_id in graph.order():
        node = graph.nodes[node_id]
        earlier = done.get(node_id)
        if earlier is not None and not _waits_on_delivery(earlier):
            step, state = dict(earlier), _replayed(earlier)
            status[node_id], output = state, step.get("output")
        else:
            started, clock = utcnow(), perf_counter()
            step = {"node_id": node_id, "type": node.type_key, "input": None}
            output, error, reason = None, None, None
            if earlier is not None:  # a webhook sent in an earlier pass
                step["input"] = earlier.get("input")
                state, output, error = webhooks.step_outcome(earlier["output"]["delivery_id"])
                started = datetime.fromisoformat(earlier["started_at"])
            elif node is graph.trigger and (slot := ctx.values["trigger"].get("slot")):
                state, output = "succeeded", {"slot": slot}
            elif node is graph.trigger:
                state, output = "succeeded", {"record_id": ctx.values["record"].get("id")}
            elif any(status.get(e.source) == WAITING for e in graph.incoming(node_id)):
                state, reason = WAITING, WAITS
            elif not any(e.index in fired for e in graph.incoming(node_id)):
                state, reason = "skipped", _skip_reason(graph, node_id, status)
            else:
                step["input"] = render(node.raw_config, ctx.values)
                if node.node_type.kind == "action" and ctx.heartbeat is not None:
                    ctx.heartbeat([*steps, {**step, "status": "running", "output": None}])
                ctx.node_id = node_id
                state, output, error = _run_node(node, ctx)
            status[node_id] = "blocked" if reason == "An earlier step failed." else state
            if state == "withheld":  # stored as skipped, with why
                state, reason, error = "skipped", error, None
            step |= {
                "status": state,
                "output": output,
                "error": error,
                "reason": reason,
                "started_at": started.isoformat(),
                "duration_ms": round((perf_counter() - clock) * 1000, 1)
                if earlier is None
                else earlier.get("duration_ms", 0.0),
            }
        ctx.values["nodes"][node_id] = output or {}
        if step["status"] == "succeeded":
            fired |= {
                e.index
                for e in graph.outgoing(node_id)
                if e.when is None or e.when == bool((output or {}).get("matched"))
            }
        steps.append(step)
    return steps
