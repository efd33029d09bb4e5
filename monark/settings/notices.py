"""What the org's admins hear of: the AI budget at 80% and at 100% (once per period and
threshold, with the audited crossing), and an invitation accepted (with the join)."""

from __future__ import annotations

from flask import url_for
from sqlalchemy import select

from monark.core.models import Membership, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.notifications.kinds import GONE, Kind, Shown, register
from monark.notifications.models import Notification
from monark.notifications.services import admins, notify


def budget_reached(org_id: int, threshold: int, period: str) -> None:
    """Tell the admins the month's budget reached ``threshold`` percent (in the
    transaction that marks the crossing, which happens once per period)."""
    notify(
        org_id,
        admins(org_id),
        Kind.BUDGET_REACHED,
        "org",
        org_id,
        data={"threshold": threshold, "period": period},
    )


def member_joined(membership: Membership, invite_id: int) -> None:
    """Tell the admins someone accepted an invitation (in the join's transaction)."""
    notify(
        membership.org_id,
        admins(membership.org_id),
        Kind.MEMBER_JOINED,
        "membership",
        membership.id,
        actor_id=membership.user_id,
        data={"invite_id": invite_id},
    )


def _draw_budget(reader: Principal, notification: Notification) -> Shown:
    if not reader.can("org.manage"):
        return GONE  # for admins only: one who is no longer one reads nothing of it
    data = notification.data or {}
    threshold, period = data.get("threshold"), data.get("period", "this month")
    link = url_for("settings_usage.page")
    if threshold == 100:
        return Shown(f"The AI budget for {period} is used up: the assistant is paused.", link)
    return Shown(f"The AI budget for {period} is {threshold}% used.", link)


def _draw_joined(reader: Principal, notification: Notification) -> Shown:
    if not reader.can("org.manage"):
        return GONE
    row = db.session.execute(
        select(User.name, Membership.role)
        .join(Membership, Membership.user_id == User.id)
        .where(Membership.id == notification.subject_id, Membership.org_id == reader.org_id)
    ).one_or_none()
    if row is None:
        return Shown("Someone accepted an invitation (and has left since).")
    return Shown(
        f"{row.name} accepted the invitation and joined as {row.role}.",
        url_for("settings.org_settings"),
    )


register(Kind.BUDGET_REACHED, _draw_budget)
register(Kind.MEMBER_JOINED, _draw_joined)
