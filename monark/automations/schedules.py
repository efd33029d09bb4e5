"""Schedules: a periodic job runs each enabled schedule's due slot, once.

Every minute (``run_due``) each enabled automation with a ``schedule`` trigger is looked
at: its slots since the later of its last claimed slot and its last change (switching it
on, editing it) that are due by now. Each slot is claimed by a unique (automation, slot)
key as its run is stored, so however many workers check at once, and whatever restarts,
a slot runs (or is skipped) once.

A slot missed while no worker ran: the newest due slot runs on recovery if it is less
than one period late (the time from it to the slot after it); every slot older than that
is recorded as one skipped run, which says which slots were missed.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import func, select

from monark.automations import cron, engine
from monark.automations.models import Automation, AutomationRun
from monark.automations.nodes import SCHEDULE
from monark.automations.ownership import owner_of, switch_off
from monark.core import jobs
from monark.core.models import as_utc, utcnow
from monark.extensions import db

log = logging.getLogger(__name__)


def expression_of(automation: Automation) -> str | None:
    """The cron expression of a schedule-triggered automation (None for other triggers)."""
    if automation.trigger_type != SCHEDULE:
        return None
    for node in automation.graph.get("nodes", []):
        if node.get("type") == SCHEDULE:
            return (node.get("config") or {}).get("cron")
    return None


def described(automation: Automation) -> str | None:
    """When a schedule-triggered automation runs, in words (None for other triggers)."""
    expression = expression_of(automation)
    if expression is None:
        return None
    return cron.describe(expression, cron.org_zone(automation.org_id))


def _shown(slot: datetime, automation: Automation) -> str:
    zone = cron.org_zone(automation.org_id)
    return f"{slot.astimezone(zone):%Y-%m-%d %H:%M} {zone.key}"


def _last_slot(automation_id: int) -> datetime | None:
    return as_utc(
        db.session.scalar(
            select(func.max(AutomationRun.slot_at)).where(
                AutomationRun.automation_id == automation_id
            )
        )
    )


def due_slots(
    automation: Automation, now: datetime
) -> tuple[datetime | None, tuple[datetime, datetime] | None]:
    """The slot to run now (None: none on time) and the oldest and newest missed slots to
    record as skipped (None: none missed)."""
    expression = expression_of(automation)
    if expression is None:
        return None, None
    zone = cron.org_zone(automation.org_id)
    since = max(t for t in (_last_slot(automation.id), as_utc(automation.updated_at)) if t)
    first = cron.next_slot(expression, since, zone)
    if first is None or first > now:
        return None, None
    latest = cron.latest_slot(expression, now, zone)
    if latest is None:
        return None, None
    on_time = now - latest < cron.period_at(expression, latest, zone)
    missed_until = cron.previous_slot(expression, latest, zone) if on_time else latest
    missed = None
    if missed_until is not None and missed_until >= first:
        missed = (first, missed_until)
    return (latest if on_time else None), missed


def _missed_reason(automation: Automation, first: datetime, last: datetime) -> str:
    period = cron.period_at(expression_of(automation) or "", last, cron.org_zone(automation.org_id))
    which = (
        f"the slot of {_shown(last, automation)} was"
        if first == last
        else f"the slots from {_shown(first, automation)} to {_shown(last, automation)} were"
    )
    return (
        f"Not run: {which} missed while no worker was running, and a missed slot runs late "
        f"only if it is less than one period ({_period_text(period)}) late."
    )


def _period_text(period: timedelta) -> str:
    minutes = int(period.total_seconds() // 60)
    for unit, size in (("day", 1440), ("hour", 60)):
        if minutes >= size and minutes % size == 0:
            count = minutes // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def run_schedule(automation: Automation, now: datetime) -> int | None:
    """Claim and run (or skip) what of one schedule is due at ``now``; the id of the run
    it started, or None."""
    slot, missed = due_slots(automation, now)
    if slot is None and missed is None:
        return None
    owner = owner_of(db.session, automation)
    if owner.lapse:  # its owner may no longer vouch for it: off, as for an event
        switch_off(automation, owner)
        db.session.commit()
        return None
    base = engine.Trigger(type=SCHEDULE, org_id=automation.org_id, model_key=None)
    if missed is not None:
        first, last = missed
        trigger = replace(base, slot=last)
        engine.skip(automation, trigger, _missed_reason(automation, first, last))
    if slot is None:
        return None
    trigger = replace(base, slot=slot)
    return engine.start_chain(automation, trigger, owner)


@jobs.periodic("automations.schedules", minutes=1)
def run_due() -> int:
    """Run every enabled schedule's due slot (each claimed once); how many runs started."""
    now = utcnow()
    ids = db.session.scalars(
        select(Automation.id)
        .where(Automation.enabled.is_(True), Automation.trigger_type == SCHEDULE)
        .order_by(Automation.id)
    ).all()
    db.session.commit()
    started = 0
    for automation_id in ids:
        automation = db.session.get(Automation, automation_id)
        if automation is None or not automation.enabled:
            continue
        try:
            started += run_schedule(automation, now) is not None
        except Exception:  # one schedule's failure must not hold up the others
            db.session.rollback()
            log.exception("schedule of automation %s failed to run", automation_id)
    return started
