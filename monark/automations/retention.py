"""Runs past ``AUTOMATION_RUN_RETENTION`` are pruned by a periodic job."""

from __future__ import annotations

from datetime import timedelta

from flask import current_app
from sqlalchemy import delete, func, select

from monark.automations.models import AutomationRun
from monark.core import jobs
from monark.core.models import utcnow
from monark.extensions import db

BATCH = 1000  # rows per statement: a long delete must not hold the database for long


@jobs.periodic("automations.prune_runs", minutes=60)
def prune_runs() -> int:
    """Delete runs started before the retention; how many. Each schedule keeps its newest
    slot's run, which says where its schedule stands."""
    cutoff = utcnow() - timedelta(seconds=float(current_app.config["AUTOMATION_RUN_RETENTION"]))
    newest_slots = (
        select(func.max(AutomationRun.id))
        .where(AutomationRun.slot_at.is_not(None))
        .group_by(AutomationRun.automation_id)
    )
    pruned = 0
    while True:
        batch = (
            select(AutomationRun.id)
            .where(AutomationRun.started_at < cutoff, AutomationRun.id.not_in(newest_slots))
            .limit(BATCH)
        )
        ids = db.session.scalars(batch).all()
        if not ids:
            return pruned
        db.session.execute(delete(AutomationRun).where(AutomationRun.id.in_(ids)))
        db.session.commit()
        pruned += len(ids)
