"""What every HTML page shares: template context, filters and security headers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Flask, current_app, request
from sqlalchemy import select

from monark.core.auth import current_principal, memberships_of
from monark.core.models import Org, User, as_utc
from monark.extensions import db

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def assistant_name(org: Org | None) -> str:
    """The one resolved assistant name: the org's (with branding on), else the deployment's."""
    if org is not None and org.branding_enabled and (org.assistant_name or "").strip():
        return org.assistant_name.strip()
    return current_app.config.get("MONARK_ASSISTANT_NAME") or "Chrysa"


def _page_context() -> dict[str, Any]:
    if request.blueprint == "api" or (request.endpoint or "").startswith("static"):
        return {}
    try:
        principal = current_principal()
    except Exception:  # an invalid bearer on a page: render it signed out
        principal = None
    if principal is None or principal.user_id is None:
        return {"principal": None}
    from monark.records.models import RecordModel

    memberships = memberships_of(principal.user_id)
    org = next((m.org for m in memberships if m.org_id == principal.org_id), None)
    nav_models = db.session.scalars(
        select(RecordModel).where(RecordModel.org_id == principal.org_id).order_by(RecordModel.name)
    ).all()
    return {
        "principal": principal,
        "me": db.session.get(User, principal.user_id),
        "org": org,
        "memberships": memberships,
        "nav_models": nav_models,
        "assistant_name": assistant_name(org),
    }


def _when(value: datetime | None) -> str:
    value = as_utc(value)
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "—"


def register_web(app: Flask) -> None:
    """Context processor, filters and headers for HTML pages."""
    app.context_processor(_page_context)
    app.add_template_filter(_when, "when")

    @app.after_request
    def security_headers(response):
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("X-Frame-Options", "DENY")
        if request.headers.get("HX-Request"):
            response.headers.add("Vary", "HX-Request")
        return response
