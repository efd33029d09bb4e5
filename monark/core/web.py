"""What every HTML page shares: template context, filters and security headers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Flask, Response, current_app, has_request_context, redirect, request, url_for

from monark.core import nul, zones
from monark.core.auth import current_principal, in_process, memberships_of
from monark.core.errors import Unauthorized, database_down
from monark.core.htmx import vary
from monark.core.ids import IdConverter
from monark.core.models import User
from monark.core.rbac import Principal
from monark.core.text import scrub
from monark.extensions import csrf, db

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


def page_principal() -> Principal | None:
    """The signed-in user's principal on an HTML page; None for API calls, static files and
    visitors who are signed out (an invalid bearer on a page renders it signed out)."""
    if request.blueprint == "api" or (request.endpoint or "").startswith("static"):
        return None
    if database_down():
        return None  # the answer says so, drawn without asking the database who this is
    try:
        principal = current_principal()
    except Unauthorized:
        return None
    return principal if principal is not None and principal.user_id is not None else None


def see_other(endpoint: str, **values: Any) -> Response:
    """The answer to a form post: 303 See Other, so the browser GETs ``url_for(endpoint)``."""
    return redirect(url_for(endpoint, **values), 303)


def _page_context() -> dict[str, Any]:
    """Who is signed in, and their orgs (features add their own: the nav, the assistant)."""
    principal = page_principal()
    if principal is None:
        return {"principal": None}
    memberships = memberships_of(principal.user_id)
    return {
        "principal": principal,
        "me": db.session.get(User, principal.user_id),
        "org": next((m.org for m in memberships if m.org_id == principal.org_id), None),
        "memberships": memberships,
    }


def _when(value: datetime | None, seconds: bool = False) -> str:
    """A stored time as the page's reader reads it: on their clock, with their zone's
    abbreviation (a bare time would be ambiguous). ``seconds``: where tries a few seconds
    apart must read apart (a webhook's log)."""
    tz = zones.reader_zone(page_principal()) if has_request_context() else zones.zone(None)
    return zones.written(value, tz, seconds)


def register_web(app: Flask) -> None:
    """URL converters, context processor, filters and headers for HTML pages."""
    app.url_map.converters["int"] = IdConverter
    # Every ``{{ }}`` output: a lone surrogate from a JSON column would fail the encoding.
    app.jinja_env.finalize = scrub
    app.config["WTF_CSRF_CHECK_DEFAULT"] = False  # ``csrf_check`` below decides
    app.context_processor(_page_context)

    @app.before_request
    def csrf_check() -> None:
        """Every state-changing browser request needs the CSRF token (form field or header).

        API-key calls carry no cookie, so they cannot be forged cross-site; in-process
        calls from the assistant come with their principal bound by the server. A request
        no route takes runs no view, so it answers its own 404 or 405 instead.
        """
        if request.method in ("GET", "HEAD", "OPTIONS", "TRACE"):
            return
        if request.routing_exception is not None:
            return
        if not current_app.config.get("WTF_CSRF_ENABLED", True):
            return
        if in_process():
            return
        if (
            request.blueprint == "api"
            and request.headers.get("Authorization", "")[:7].lower() == "bearer "
        ):
            return
        csrf.protect()

    # NUL in a query or form: refused for API clients, an invalid field for a browser.
    app.before_request(nul.refuse_nul)
    nul.install()

    app.add_template_filter(_when, "when")
    app.add_template_filter(lambda s: s[:1].upper() + s[1:] if s else s, "capitalize_first")
    # A flash for one section of a page is flashed as "<category>:<section>" (``_macros.html``).
    app.add_template_test(lambda category: ":" not in category, "page_flash")
    app.add_template_test(lambda category, section: category.endswith(":" + section), "for_section")

    @app.after_request
    def security_headers(response):
        if in_process():  # a browser never sees it
            return response
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("X-Frame-Options", "DENY")
        return vary(response)
