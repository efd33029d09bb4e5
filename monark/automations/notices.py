"""An automation failing again and again tells its owner, once per streak.

When a run ends failed, and it makes ``NOTIFICATIONS_FAILED_RUNS`` failed runs in a row of
its automation (test runs and skipped ones aside), the owner is notified, in the
transaction that stores the run's end. The run after which the streak is longer says
nothing more; a run that succeeds ends the streak, so the next one is told of again.
"""

from __future__ import annotations

from flask import url_for
from sqlalchemy import select

from monark.automations.models import Automation, AutomationRun
from monark.core.rbac import Principal
from monark.core.settings import settings
from monark.extensions import db
from monark.notifications.kinds import GONE, Kind, Shown, register
from monark.notifications.models import Notification
from monark.notifications.services import notify

FINISHED = ("failed", "succeeded")


def run_ended(run: AutomationRun, automation: Automation) -> None:
    """After ``run`` ended (its status set, not committed): notify the owner when it makes
    the streak of failed runs exactly as long as the setting says."""
    if run.is_test or run.status != "failed" or automation.owner_id is None:
        return
    streak = settings().notifications.failed_runs
    last = db.session.scalars(
        select(AutomationRun.status)
        .where(
            AutomationRun.automation_id == automation.id,
            AutomationRun.org_id == automation.org_id,
            AutomationRun.is_test.is_(False),
            AutomationRun.status.in_(FINISHED),
        )
        .order_by(AutomationRun.id.desc())
        .limit(streak + 1)
    ).all()
    in_a_row = len(last[:streak]) == streak and all(s == "failed" for s in last[:streak])
    if not in_a_row or (len(last) > streak and last[streak] == "failed"):
        return
    notify(
        automation.org_id,
        [automation.owner_id],
        Kind.AUTOMATION_FAILING,
        "automation",
        automation.id,
        data={"runs": streak, "run_id": run.id},
    )


def _draw(reader: Principal, notification: Notification) -> Shown:
    automation = db.session.scalar(
        select(Automation).where(
            Automation.id == notification.subject_id, Automation.org_id == reader.org_id
        )
    )
    if automation is None:
        return GONE
    runs = (notification.data or {}).get("runs", "several")
    if not reader.can("automation.view"):
        return Shown(f"An automation of yours failed {runs} times in a row.")
    return Shown(
        f"Automation “{automation.name}” failed {runs} times in a row",
        url_for("automations.detail", automation_id=automation.id),
    )


register(Kind.AUTOMATION_FAILING, _draw)
