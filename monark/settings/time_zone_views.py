"""Time zones on the profile (everyone) and the org's default on Settings (admins); the
browser's zone at first sign-in (``static/js/timezone.js``). Services: ``time_zones``."""

from __future__ import annotations

from flask import Blueprint, flash, jsonify, request, url_for

from monark.core import zones
from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.htmx import redirect_full
from monark.settings import time_zones
from monark.settings.views import org_page, profile_page

bp = Blueprint("settings_zones", __name__)


@bp.app_template_global()
def time_zone_names() -> tuple[str, ...]:
    """Every IANA zone name, for a time-zone field's list."""
    return zones.names()


@bp.app_template_global()
def zone_label(name: str | None) -> str:
    """A zone with its abbreviation now ("Asia/Tokyo (JST)")."""
    tz = zones.zone(name)
    return f"{tz.key} ({zones.abbreviation(zones.local_now(None).astimezone(tz))})"


@bp.post("/profile/time-zone")
@guard()
def profile_zone():
    """Save the user's own time zone; an unknown one is refused beside the field."""
    typed = request.form.get("time_zone", "")
    try:
        user = time_zones.set_user_zone(require_principal(), typed)
    except ValidationFailed as err:
        return profile_page(err.field_errors(), 422, time_zone_typed=typed)
    flash(f"Time zone saved: times are shown in {zone_label(user.time_zone)}.", "info:time-zone")
    # Every time on the page changes: the whole page again. No anchor: from /profile, a load
    # of /profile#time-zone would only scroll (the page shows its section's message itself).
    return redirect_full(url_for("settings.profile"))


@bp.post("/profile/time-zone/browser")
@guard()
def browser_zone():
    """The browser's zone at first sign-in, kept only while the user has none (JSON)."""
    kept = time_zones.adopt_browser_zone(require_principal(), request.form.get("time_zone"))
    return jsonify(kept=kept)


@bp.post("/settings/time-zone")
@guard("org.manage")
def org_zone():
    """Save the org's default time zone (schedules, and members who set none)."""
    typed = request.form.get("time_zone", "")
    try:
        name = time_zones.set_org_zone(require_principal(), typed)
    except ValidationFailed as err:
        return org_page(time_zone_errors=err.field_errors(), time_zone_typed=typed, status=422)
    flash(f"Time zone saved: {zone_label(name)}.", "info:org-time-zone")
    return redirect_full(url_for("settings.org_settings"))
