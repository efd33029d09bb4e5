"""The audit log page: every domain event of the org, filterable, paginated."""

from __future__ import annotations

from flask import Blueprint, request

from monark.audit import services
from monark.core.auth import guard, require_principal
from monark.core.htmx import render_swap
from monark.core.ids import parse_id, query_id

bp = Blueprint("audit", __name__)


def _filters(actor: str) -> services.AuditFilters:
    """The page's query string as filters; ``actor`` is ``kind`` or ``kind:id``."""
    before = query_id("before")
    kind, _, raw_id = actor.partition(":")
    return services.AuditFilters(
        event_type=request.args.get("type", "").strip(),
        actor_kind=kind if actor else None,
        actor_id=parse_id(raw_id, "actor", "query") if actor else None,
        hide_chat=request.args.get("hide_chat") == "1",
        before=before,
    )


@bp.get("/audit")
@guard("audit.view")
def audit_log():
    """Events newest first, filtered by type and actor, in keyset pages."""
    principal = require_principal()
    actor = request.args.get("actor", "").strip()
    filters = _filters(actor)
    page = services.audit_page(principal, filters)
    context = {
        "actors": services.actor_choices(principal),
        "types": services.event_types(principal),
        "actor": actor,
        "event_type": filters.event_type,
        "hide_chat": filters.hide_chat,
        "before": filters.before,
        "content_keys": services.CONTENT_KEYS,
        "lapses": services.LAPSES,
        **vars(page),  # the events, the next page's cursor, and the names they show
    }
    return render_swap("audit-table", "audit/_table.html", "audit/list.html", **context)
