"""The bell in the header, the list of notifications, and each person's mail choices.

The bell is drawn with every signed-in page (one count query) and asked again every
``NOTIFICATIONS_POLL`` by ``static/js/app.js`` while the tab is visible (a custom event
htmx listens for: no inline script, no ``eval`` under the CSP). Views only: the queries and
the rules are ``monark.notifications.services``.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, flash, redirect, render_template, request, url_for

from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.htmx import is_htmx
from monark.core.ids import parse_id
from monark.core.settings import settings
from monark.core.web import page_principal, see_other
from monark.notifications import services
from monark.notifications.kinds import DELIVERY_LABELS

bp = Blueprint("notifications", __name__)
bp.add_app_template_global(DELIVERY_LABELS, "delivery_labels")


@bp.app_context_processor
def _bell() -> dict[str, Any]:
    """Every signed-in page's bell: the unread count (one query) and the poll interval."""
    principal = page_principal()
    if principal is None:
        return {}
    return {
        "notifications_unread": services.unread_count(principal),
        "notifications_poll": settings().notifications.poll_seconds,
    }


@bp.get("/notifications")
@guard()
def index():
    """The signed-in member's notifications in this org, newest first, a page at a time."""
    principal = require_principal()
    before = parse_id(request.args.get("before"), "before", "query")
    return render_template(
        "notifications/index.html",
        page=services.page(principal, before),
        first_page=before is None,
        partial_bell=is_htmx(),
    )


@bp.get("/notifications/bell")
@guard()
def bell():
    """The bell alone, for its poll."""
    return render_template("notifications/_bell.html")


@bp.post("/notifications/<int:notification_id>/open")
@guard()
def open_notification(notification_id: int):
    """Mark one notification read and go where it leads (the list, when nowhere)."""
    shown = services.open_one(require_principal(), notification_id)
    return redirect(shown.link or url_for("notifications.index"), 303)


@bp.post("/notifications/read")
@guard()
def read_all():
    """Mark every notification of the member read."""
    count = services.mark_all_read(require_principal())
    flash(f"{count} marked read." if count else "Nothing was unread.", "info")
    return see_other("notifications.index")


@bp.post("/profile/notifications")
@guard()
def preferences():
    """Store how each kind of notification goes by mail (the profile's section)."""
    principal = require_principal()
    try:
        services.set_preferences(principal, request.form)
    except ValidationFailed as err:
        page = render_template(
            "notifications/preferences.html",
            notification_prefs=services.preference_rows(principal.user_id),  # type: ignore[arg-type]
            notification_errors=err.field_errors(),
        )
        return page, 422
    flash("Notification settings saved.", "info:notifications")
    return see_other("settings.profile", _anchor="notifications")
