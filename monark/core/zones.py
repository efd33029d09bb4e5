"""Time zones: the reader's zone, their local now and today, and times written for them.

A person's zone is their own (``User.time_zone``, set on the profile), else their org's
default (``Org.time_zone``, Settings; also the zone of its schedules), else UTC. A caller
with no person (an API key, an automation) reads in the org's zone. Every time a person
reads (``when``) or means ("today" in a filter, ``records_query``'s ``date('now')``, the
assistant's page context) goes through ``reader_zone``. Times are stored in UTC.
"""

from __future__ import annotations

from datetime import date, datetime
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from flask import has_request_context, request

from monark.core.errors import ValidationFailed
from monark.core.models import Org, User, as_utc, utcnow
from monark.core.rbac import Principal
from monark.extensions import db

DEFAULT = "UTC"
MAX_LENGTH = 64  # the columns' width; the longest IANA name is 32 characters


@cache
def names() -> tuple[str, ...]:
    """Every IANA zone name this machine knows, sorted (the choices a form offers)."""
    return tuple(sorted(available_timezones()))


@cache
def _known() -> frozenset[str]:
    return frozenset(names())


def is_zone(name: str | None) -> bool:
    """Whether ``name`` is an IANA zone name, exactly as the database spells it."""
    return bool(name) and len(name) <= MAX_LENGTH and name in _known()


def checked(raw: object, field: str) -> str:
    """``raw`` as a zone name (surrounding spaces dropped), or ``ValidationFailed`` naming
    ``field``: only names of the IANA database, as written there ("Europe/Paris")."""
    name = raw.strip() if isinstance(raw, str) else ""
    if is_zone(name):
        return name
    if not name:
        message = "Choose a time zone, such as Europe/Paris or UTC."
    else:
        shown = name if len(name) <= 40 and name.isprintable() else "That"
        message = (
            f"{shown} is not a time zone of the IANA database: choose one from the list, "
            "written as it is there (Region/City, such as America/Los_Angeles, or UTC)."
        )
    raise ValidationFailed("Unknown time zone.", [{"field": field, "message": message}])


def zone(name: str | None) -> ZoneInfo:
    """The zone of a stored name; UTC for none (or one this machine no longer knows)."""
    if name and is_zone(name):
        return ZoneInfo(name)
    return ZoneInfo(DEFAULT)


def org_zone(org_id: int) -> ZoneInfo:
    """An org's default zone: its schedules', and that of members who set none."""
    org = db.session.get(Org, org_id)
    return zone(org.time_zone if org is not None else None)


def user_zone(user_id: int | None, org_id: int) -> ZoneInfo:
    """A person's zone in an org: their own, else the org's, else UTC."""
    user = db.session.get(User, user_id) if user_id is not None else None
    if user is not None and user.time_zone and is_zone(user.time_zone):
        return ZoneInfo(user.time_zone)
    return org_zone(org_id)


def reader_zone(principal: Principal | None) -> ZoneInfo:
    """The zone ``principal`` reads times in (UTC with no principal). Within a request it
    is resolved once, cached on the request as the principal is (``core.auth``)."""
    if principal is None:
        return ZoneInfo(DEFAULT)
    key = (principal.user_id, principal.org_id)
    cached = getattr(request, "_monark_zone", None) if has_request_context() else None
    if cached is not None and cached[0] == key:
        return cached[1]
    found = user_zone(principal.user_id, principal.org_id)
    if has_request_context():
        request._monark_zone = (key, found)
    return found


def forget_reader_zone() -> None:
    """Drop this request's resolved zone (after the reader's zone changed)."""
    if has_request_context() and hasattr(request, "_monark_zone"):
        del request._monark_zone


def local_now(principal: Principal | None, now: datetime | None = None) -> datetime:
    """``now`` (default: this instant) on the principal's clock, aware of its zone."""
    return as_utc(now or utcnow()).astimezone(reader_zone(principal))


def local_today(principal: Principal | None, now: datetime | None = None) -> date:
    """The principal's date at ``now`` (default: this instant): what "today" means to them."""
    return local_now(principal, now).date()


def abbreviation(moment: datetime) -> str:
    """The zone's short name at ``moment`` ("JST", "CET"; "UTC+14" where the database has
    only an offset, which it writes "+14")."""
    name = moment.tzname() or ""
    if name and name[0] in "+-":
        return f"UTC{name}"
    return name or "UTC"


def written(value: datetime | None, tz: ZoneInfo, seconds: bool = False) -> str:
    """``value`` as ``2026-12-03 09:30 JST`` on ``tz``'s clock ("—" for none); ``seconds``
    where moments a few seconds apart must read apart (a webhook's tries)."""
    value = as_utc(value)
    if value is None:
        return "—"
    local = value.astimezone(tz)
    shape = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    return f"{local.strftime(shape)} {abbreviation(local)}"
