"""Time zones people choose: their own (the profile), the one their browser reports at first
sign-in (kept only while they have none), and the org's default (admins). Which zone a
reader reads in is ``monark.core.zones``."""

from __future__ import annotations

from sqlalchemy import update

from monark.core import zones
from monark.core.errors import NotFound
from monark.core.events import record_event
from monark.core.models import Org, User
from monark.core.rbac import Principal
from monark.extensions import db
from monark.settings.services import get_org


def _user(principal: Principal) -> User:
    user = db.session.get(User, principal.user_id) if principal.user_id is not None else None
    if user is None:
        raise NotFound("No such user.")
    return user


def set_user_zone(principal: Principal, raw: object) -> User:
    """The user's own time zone (``ValidationFailed`` naming ``time_zone``: nothing changes)."""
    user = _user(principal)
    _set_zone(principal, user, "user", zones.checked(raw, "time_zone"))
    return user


def _set_zone(principal: Principal, row: User | Org, kind: str, name: str) -> None:
    """Keep ``name`` as the row's zone (an event only when it changed), and forget the
    readers' zones this request worked out."""
    if row.time_zone != name:
        row.time_zone = name
        record_event(principal, f"{kind}.updated", kind, row.id, {"fields": ["time_zone"]})
    db.session.commit()
    zones.forget_reader_zone()


def adopt_browser_zone(principal: Principal, raw: object) -> bool:
    """The zone the user's browser reports, kept only if they have none yet (their first
    sign-in): one conditional update, so a choice made meanwhile on the profile stands.
    Whether it was kept; ``ValidationFailed`` naming ``time_zone`` for an unknown one."""
    name = zones.checked(raw, "time_zone")
    user = _user(principal)
    kept = db.session.execute(
        update(User)
        .where(User.id == user.id, User.time_zone.is_(None))
        .values(time_zone=name)
        .execution_options(synchronize_session=False)
    ).rowcount
    if kept:
        record_event(
            principal, "user.updated", "user", user.id, {"fields": ["time_zone"], "by": "browser"}
        )
    db.session.commit()
    db.session.expire(user, ["time_zone"])
    zones.forget_reader_zone()
    return bool(kept)


def set_org_zone(principal: Principal, raw: object) -> str:
    """The org's default time zone (admins): its schedules' and that of members without
    one. ``ValidationFailed`` naming ``time_zone``: nothing changes."""
    principal.require("org.manage")
    name = zones.checked(raw, "time_zone")
    _set_zone(principal, get_org(principal), "org", name)
    return name
