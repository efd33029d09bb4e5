"""Notifications: made in the transaction of the change they report, listed, counted and
read by their recipient alone (another member's, or another org's, is not found).

``notify`` adds rows to the caller's session and never commits: a change that rolls back
leaves no notification, and one that commits mails it afterwards (``delivery``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update

from monark.core.errors import NotFound, ValidationFailed
from monark.core.events import record_event
from monark.core.models import Membership, utcnow
from monark.core.rbac import Principal
from monark.extensions import db
from monark.notifications.kinds import DEFAULTS, LABELS, Delivery, Kind, Shown, draw
from monark.notifications.models import Notification, NotificationPreference

PAGE_SIZE = 20
NOT_FOUND = "No such notification."


def notify(
    org_id: int,
    user_ids: Iterable[int | None],
    kind: Kind,
    subject_type: str,
    subject_id: int | None,
    *,
    actor_id: int | None = None,
    data: Mapping[str, Any] | None = None,
) -> list[Notification]:
    """Add a notification of ``kind`` for each of ``user_ids`` who is a member of the org
    (the one who set it off excepted) to the session, mailed as each one prefers."""
    wanted = {u for u in user_ids if u is not None and u != actor_id}
    if not wanted:
        return []
    members = db.session.scalars(
        select(Membership.user_id).where(
            Membership.org_id == org_id, Membership.user_id.in_(wanted)
        )
    ).all()
    chosen = deliveries(members, kind)
    made = [
        Notification(
            org_id=org_id,
            user_id=user_id,
            kind=kind,
            subject_type=subject_type,
            subject_id=subject_id,
            actor_id=actor_id,
            data=dict(data or {}),
            mail=chosen[user_id],
        )
        for user_id in sorted(members)
    ]
    db.session.add_all(made)
    return made


def admins(org_id: int) -> list[int]:
    """The org's owners and admins (who hear of its budget and its new members)."""
    return list(
        db.session.scalars(
            select(Membership.user_id).where(
                Membership.org_id == org_id, Membership.role.in_(("owner", "admin"))
            )
        )
    )


# ---- preferences ---------------------------------------------------------------------------


def deliveries(user_ids: Iterable[int], kind: Kind) -> dict[int, Delivery]:
    """How ``kind`` goes by mail to each of ``user_ids`` (their choice, else its default)."""
    ids = list(user_ids)
    chosen = dict(
        db.session.execute(
            select(NotificationPreference.user_id, NotificationPreference.delivery).where(
                NotificationPreference.user_id.in_(ids), NotificationPreference.kind == kind
            )
        ).all()
    )
    return {u: Delivery(chosen.get(u, DEFAULTS[kind])) for u in ids}


def preferences(user_id: int) -> dict[Kind, Delivery]:
    """Each kind's mail for this person (their choice, else its default)."""
    chosen = dict(
        db.session.execute(
            select(NotificationPreference.kind, NotificationPreference.delivery).where(
                NotificationPreference.user_id == user_id
            )
        ).all()
    )
    return {kind: Delivery(chosen.get(kind, DEFAULTS[kind])) for kind in Kind}


def set_preferences(principal: Principal, form: Mapping[str, str]) -> list[Kind]:
    """Store the principal's mail for each kind from the form (a field per kind), audited;
    the kinds that changed. ``ValidationFailed`` naming each field whose value is no
    delivery, nothing stored then."""
    user_id = principal.user_id
    values = {kind: (form.get(kind) or DEFAULTS[kind]).strip() for kind in Kind}
    problems = [
        {"field": kind.value, "message": "Choose at once, daily digest or never."}
        for kind, value in values.items()
        if value not in set(Delivery)
    ]
    if problems or user_id is None:
        raise ValidationFailed("Check the notification settings.", problems)
    before = preferences(user_id)
    stored = {
        row.kind: row
        for row in db.session.scalars(
            select(NotificationPreference).where(NotificationPreference.user_id == user_id)
        )
    }
    for kind, value in values.items():
        if kind in stored:
            stored[kind].delivery = value
        else:
            db.session.add(NotificationPreference(user_id=user_id, kind=kind, delivery=value))
    changed = [kind for kind in Kind if before[kind] != values[kind]]
    if changed:
        record_event(
            principal,
            "user.updated",
            "user",
            user_id,
            {"fields": ["notification_preferences"], "kinds": [k.value for k in changed]},
        )
    db.session.commit()
    return changed


def preference_rows(user_id: int) -> list[tuple[Kind, str, Delivery]]:
    """The form's rows: each kind, its label and its mail now."""
    chosen = preferences(user_id)
    return [(kind, LABELS[kind], chosen[kind]) for kind in Kind]


# ---- reading ---------------------------------------------------------------------------------


def _mine(principal: Principal):
    """The principal's own notifications in its org: every query starts here."""
    return (Notification.org_id == principal.org_id) & (Notification.user_id == principal.user_id)


def unread_count(principal: Principal) -> int:
    """How many of the principal's notifications are unread (the bell), in one query."""
    if principal.user_id is None:
        return 0
    return (
        db.session.scalar(
            select(func.count(Notification.id)).where(
                _mine(principal), Notification.read_at.is_(None)
            )
        )
        or 0
    )


@dataclass(frozen=True)
class Entry:
    """One notification in the list, drawn for its reader."""

    notification: Notification
    shown: Shown

    @property
    def unread(self) -> bool:
        return self.notification.read_at is None


@dataclass(frozen=True)
class Page:
    """A page of the list, newest first; ``before``: the cursor of the next, older page."""

    entries: list[Entry]
    before: int | None


def page(principal: Principal, before: int | None = None, size: int = PAGE_SIZE) -> Page:
    """The principal's notifications, newest first, ``size`` at a time (older than the
    ``before`` id, when given), each drawn with the principal's rights now."""
    stmt = select(Notification).where(_mine(principal))
    if before is not None:
        stmt = stmt.where(Notification.id < before)
    rows = db.session.scalars(stmt.order_by(Notification.id.desc()).limit(size + 1)).all()
    more = len(rows) > size
    rows = rows[:size]
    entries = [Entry(n, draw(principal, n)) for n in rows]
    return Page(entries, rows[-1].id if more and rows else None)


def get(principal: Principal, notification_id: int) -> Notification:
    """One of the principal's notifications; ``NotFound`` for anyone else's."""
    found = db.session.scalar(
        select(Notification).where(_mine(principal), Notification.id == notification_id)
    )
    if found is None:
        raise NotFound(NOT_FOUND)
    return found


def open_one(principal: Principal, notification_id: int) -> Shown:
    """Mark one of the principal's notifications read; what it says and where it leads."""
    found = get(principal, notification_id)
    if found.read_at is None:
        found.read_at = utcnow()
    shown = draw(principal, found)
    db.session.commit()
    return shown


def mark_all_read(principal: Principal) -> int:
    """Mark every unread notification of the principal read; how many were."""
    changed = db.session.execute(
        update(Notification)
        .where(_mine(principal), Notification.read_at.is_(None))
        .values(read_at=utcnow())
        .execution_options(synchronize_session=False)
    ).rowcount
    db.session.commit()
    return changed
