"""Runs whose worker died: a run holds a lease while it runs (renewed before each action,
with the steps so far), and a periodic job settles the runs whose lease ran out.

The rule keeps "no automation runs twice for one event": a cut-off run is taken up again
once, from the steps it had stored, only when no action was under way when it stopped (so
nothing it did can happen twice); a run cut off during an action, or cut off a second
time, is marked failed, saying so. Its claim (one run per automation and event) stays.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, func, or_, select, update

from monark.automations import engine, webhooks
from monark.automations.models import AutomationRun, WebhookDelivery
from monark.core import jobs
from monark.core.models import utcnow
from monark.extensions import db

log = logging.getLogger(__name__)

SETTLE_BATCH = 200
STALLED_GRACE_SECONDS = 30.0  # a run this long past its last webhook lost its next job
CUT_OFF_IN_ACTION = (
    "Cut off: the worker running it stopped during step {node}. It is not run again, so "
    "nothing it did can happen twice; check what {node} did."
)
CUT_OFF_TWICE = "Cut off twice: the workers running it stopped. It is not run again."


def _in_flight(run: AutomationRun) -> str | None:
    """The action that was running when the run's worker stopped, if one was."""
    last = (run.steps or [])[-1:] or [None]
    return last[0]["node_id"] if last[0] and last[0]["status"] == "running" else None


def _taken(run: AutomationRun, *also: ColumnElement[bool], **values: object) -> bool:
    """Change a run still running on a lease that ran out (and ``also``) to ``values``,
    committed: whether this caller took it (another settler may have been first)."""
    taken = db.session.execute(
        update(AutomationRun)
        .where(
            AutomationRun.id == run.id,
            AutomationRun.status == "running",
            AutomationRun.lease_until < utcnow(),
            *also,
        )
        .values(lease_until=None, **values)
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
    return taken.rowcount == 1


def _resume(run_id: int) -> bool:
    """Queue the run's job to go on; False when the queue is down (the run waits, queued
    with its context, for the next settle to take it up)."""
    try:
        engine.resume_job.enqueue(run_id)
    except Exception:
        log.warning("queue unavailable: run %s waits", run_id, exc_info=True)
        return False
    return True


def settle(run: AutomationRun) -> str:
    """Settle one cut-off run: ``resumed`` (queued again, once) or ``failed``."""
    action = _in_flight(run)
    if action is None and run.attempt < 2:
        again = AutomationRun.attempt == run.attempt
        if not _taken(run, again, status="queued", attempt=run.attempt + 1):
            return "taken"
        _resume(run.id)
        return "resumed"
    error = CUT_OFF_IN_ACTION.format(node=action) if action else CUT_OFF_TWICE
    steps = [
        {**s, "status": "failed", "error": "Cut off while it ran."}
        if s["status"] == "running"
        else s
        for s in run.steps or []
    ]
    failed = _taken(
        run, status="failed", error=error, steps=steps, finished_at=utcnow(), context=None
    )
    return "failed" if failed else "taken"


@jobs.periodic("automations.settle_runs")
def settle_cut_off() -> int:
    """Settle the runs whose lease ran out, and take up again the waiting runs whose job
    was lost; how many."""
    now = utcnow()
    runs = db.session.scalars(
        select(AutomationRun)
        .where(AutomationRun.status == "running", AutomationRun.lease_until < now)
        .order_by(AutomationRun.id)
        .limit(SETTLE_BATCH)
    ).all()
    settled = 0
    for run in runs:
        settled += settle(run) in ("resumed", "failed")
    for run_id in _stalled(now):
        if not _resume(run_id):
            break
        settled += 1
    return settled


def _stalled(now: datetime) -> list[int]:
    """Runs that wait (queued or retrying) for no delivery still open: the job that was to
    take them on was lost (its worker died after the webhook ended, or the queue was down)."""
    still_open = (
        select(WebhookDelivery.id)
        .where(
            WebhookDelivery.run_id == AutomationRun.id,
            WebhookDelivery.status.in_(webhooks.OPEN),
        )
        .exists()
    )
    ended_before = (
        select(func.max(WebhookDelivery.finished_at))
        .where(WebhookDelivery.run_id == AutomationRun.id)
        .scalar_subquery()
    )
    cutoff = now - timedelta(seconds=STALLED_GRACE_SECONDS)
    ids = db.session.scalars(
        select(AutomationRun.id)
        .where(
            AutomationRun.status.in_(["queued", "retrying"]),
            AutomationRun.context.is_not(None),
            ~still_open,
            or_(ended_before.is_(None), ended_before <= cutoff),
            AutomationRun.started_at <= cutoff,
        )
        .order_by(AutomationRun.id)
        .limit(SETTLE_BATCH)
    ).all()
    db.session.commit()
    return list(ids)
