"""Notifications by mail: at once after the change commits, or in the daily digest.

Each notification is its own outbox row: ``mail`` says how it goes (the recipient's choice
when it was made) and ``mailed_at`` whether it went. A session that commits new "at once"
notifications queues the ``notifications.mail`` job with their ids (``after_commit``;
inside a unit of work, at its real commit), and one that rolls back queues nothing. The
job claims each row by a conditional update, so the job, a redelivery and the ``sweep``
(which mails what a job never took, a queue that was down say) mail one once. The
``digest`` job sends each member, once a day after ``NOTIFICATIONS_DIGEST_HOUR`` on their
own clock (``core.zones``), what is unread of their "digest" notifications made before then.

What a message says is drawn as its reader may read it when it is sent (``kinds.draw``),
never from what the change saw.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from flask import current_app, has_request_context, request
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from monark.core import jobs, mail, zones
from monark.core.models import Membership, Org, User, as_utc, utcnow
from monark.core.rbac import Principal
from monark.core.settings import settings
from monark.core.uow import listen_once, on_commit
from monark.extensions import db
from monark.notifications.kinds import Delivery, Shown, draw
from monark.notifications.models import Notification

log = logging.getLogger(__name__)

PENDING = "notifications.mail_now"
SWEEP_GRACE = timedelta(minutes=2)  # a job queued at commit has had its chance by then
SWEEP_HORIZON = timedelta(days=1)  # older "at once" mail is stale: it is not sent late
DIGEST_MAX = 50  # items in one digest; the rest are in the app


def _collect(session: Any, _flush_context: Any) -> None:
    # Their ids now (the flush gave them): after the commit nothing may be read.
    made = [o.id for o in session.new if isinstance(o, Notification) and o.mail == Delivery.NOW]
    if made:
        session.info.setdefault(PENDING, []).extend(made)


def _forget(session: Any, *_args: Any) -> None:
    session.info.pop(PENDING, None)


def _base() -> str:
    """The address links are made under: ``PUBLIC_URL``, else this request's."""
    if settings().mail.public_url or not has_request_context():
        return settings().mail.public_url or "http://localhost"
    return request.host_url.rstrip("/")


def _after_commit(session: Any) -> None:
    made = session.info.pop(PENDING, None)
    if not made:
        return
    ids = sorted(set(made))
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    work = partial(_enqueue, app, ids, _base())
    if not on_commit(work):  # inside a unit of work: wait for its real commit
        work()


def _enqueue(app: Any, ids: list[int], base: str) -> None:
    try:
        mail_now.enqueue(ids, base, app=app)
    except Exception:
        # The change is committed and the rows wait unmailed: the sweep sends them.
        log.warning("queue unavailable: notifications %s wait for the sweep", ids, exc_info=True)


def install() -> None:
    """Listen to every ORM session for notifications to mail, once per process."""
    listen_once(
        Session,
        (("after_flush", _collect), ("after_commit", _after_commit), ("after_rollback", _forget)),
    )


def _claim(ids: Sequence[int], delivery: Delivery) -> list[Notification]:
    """Take the unmailed notifications of ``ids`` (one conditional update: nobody else
    takes them) and give them back, committed as mailed."""
    if not ids:
        return []
    now = utcnow()
    db.session.execute(
        update(Notification)
        .where(
            Notification.id.in_(ids),
            Notification.mail == delivery,
            Notification.mailed_at.is_(None),
        )
        .values(mailed_at=now)
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
    return list(
        db.session.scalars(
            select(Notification)
            .where(Notification.id.in_(ids), Notification.mailed_at == now)
            .order_by(Notification.id)
        )
    )


def reader_of(notification: Notification) -> Principal | None:
    """The recipient as a principal of the notification's org now (None: no longer in it)."""
    role = db.session.scalar(
        select(Membership.role).where(
            Membership.user_id == notification.user_id,
            Membership.org_id == notification.org_id,
        )
    )
    if role is None:
        return None
    return Principal.for_user(notification.user_id, notification.org_id, str(role))


def _absolute(shown: Shown) -> str | None:
    """Where a message's link leads, in full (inside ``mail.links_under``)."""
    if shown.link is None:
        return None
    return (settings().mail.public_url or request.host_url.rstrip("/")) + shown.link


@jobs.job("notifications.mail")
def mail_now(ids: list[int], base: str) -> None:
    """Mail each "at once" notification of ``ids`` not mailed yet, drawn for its reader."""
    with mail.links_under(base):
        for notification in _claim(ids, Delivery.NOW):
            reader = reader_of(notification)
            user = db.session.get(User, notification.user_id)
            if reader is None or user is None:
                continue
            shown = draw(reader, notification)
            org = db.session.get(Org, notification.org_id)
            mail.send(
                "notification",
                user.email,
                name=user.name,
                org=org.name if org else "Monark",
                title=shown.title,
                link=_absolute(shown),
                settings_link=mail.link("settings.profile", _anchor="notifications"),
            )


@jobs.periodic("notifications.sweep")
def sweep() -> int:
    """Mail the "at once" notifications whose job never ran (made a while ago, within a
    day); how many it took up."""
    now = utcnow()
    ids = db.session.scalars(
        select(Notification.id).where(
            Notification.mail == Delivery.NOW,
            Notification.mailed_at.is_(None),
            Notification.created_at <= now - SWEEP_GRACE,
            Notification.created_at >= now - SWEEP_HORIZON,
        )
    ).all()
    db.session.commit()
    if ids:
        mail_now.func(list(ids), settings().mail.public_url or "http://localhost")
    return len(ids)


def digest_mark(now: datetime, hour: int) -> datetime:
    """The latest digest time at or before ``now`` (today's, or yesterday's before it)."""
    mark = now.replace(hour=hour, minute=0, second=0, microsecond=0)
    return mark if mark <= now else mark - timedelta(days=1)


@jobs.periodic("notifications.digest", minutes=60)
def digest(now: datetime | None = None) -> int:
    """Send each member their digest: the "digest" notifications made before the latest
    digest hour on the member's own clock (their time zone, else their org's) that no
    digest took yet, unread ones listed (read ones are seen already); how many went."""
    now = as_utc(now) or utcnow()
    hour = settings().notifications.digest_hour
    rows = db.session.execute(
        select(
            Notification.id, Notification.user_id, Notification.org_id, Notification.created_at
        ).where(
            Notification.mail == Delivery.DIGEST,
            Notification.mailed_at.is_(None),
            Notification.created_at < now,
        )
    ).all()
    groups: dict[tuple[int, int], list[tuple[int, datetime]]] = {}
    for row in rows:
        groups.setdefault((row.user_id, row.org_id), []).append((row.id, as_utc(row.created_at)))
    due: dict[tuple[int, int], list[int]] = {}
    for (user_id, org_id), made in groups.items():
        mark = digest_mark(now.astimezone(zones.user_zone(user_id, org_id)), hour)
        if ids := [i for i, created in made if created < mark]:
            due[(user_id, org_id)] = ids
    db.session.commit()
    sent = 0
    base = settings().mail.public_url or "http://localhost"
    with mail.links_under(base):
        for (user_id, org_id), ids in sorted(due.items()):
            taken = [n for n in _claim(ids, Delivery.DIGEST) if n.read_at is None]
            if taken and _send_digest(user_id, org_id, taken):
                sent += 1
    return sent


def _send_digest(user_id: int, org_id: int, taken: list[Notification]) -> bool:
    reader = reader_of(taken[0])
    user = db.session.get(User, user_id)
    org = db.session.get(Org, org_id)
    if reader is None or user is None or org is None:
        return False
    newest = sorted(taken, key=lambda n: n.id, reverse=True)
    items = [(draw(reader, n), n) for n in newest[:DIGEST_MAX]]
    mail.send(
        "digest",
        user.email,
        name=user.name,
        org=org.name,
        items=[(shown.title, _absolute(shown)) for shown, _ in items],
        more=max(len(newest) - DIGEST_MAX, 0),
        list_link=mail.link("notifications.index"),
        settings_link=mail.link("settings.profile", _anchor="notifications"),
    )
    return True
