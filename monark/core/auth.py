"""Who is asking: session users, API keys and in-process calls resolve to one Principal.

``guard(permission)`` is the one check every web and API view goes through.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from flask import Flask, Request, Response, redirect, request, session, url_for
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface, SessionMixin
from flask_login import current_user
from werkzeug.security import check_password_hash, generate_password_hash

from monark.core import sessions
from monark.core.errors import Unauthorized, database_down, wants_json
from monark.core.htmx import current_url, is_htmx, reload
from monark.core.keys import authenticate_key
from monark.core.models import Membership, User
from monark.core.rbac import Principal
from monark.extensions import db, login_manager

F = TypeVar("F", bound=Callable[..., Any])

# The dispatcher puts a ready Principal here; HTTP clients cannot set WSGI environ keys.
PRINCIPAL_ENVIRON_KEY = "monark.principal"
_UNRESOLVED = object()


@login_manager.user_loader
def _load_user(session_id: str) -> User | None:
    if database_down():
        # Flask-Login loads the user for every template (``current_user``), the answer
        # that says the database is down included: it is drawn signed out instead.
        return None
    # ``User.get_id``: "<id>:<session version>"; a session of an older version (signed in
    # before the password changed) is signed out. A bare id predates versions: version 0.
    user_id, _, version = session_id.partition(":")
    if not user_id.isdigit() or not (version or "0").isdigit():
        return None
    # One query: the user and this session's row (``core/sessions``), signed out if revoked.
    user = sessions.load(int(user_id))
    if user is None or user.session_version != int(version or "0"):
        return None
    return user


def hash_password(password: str, method: str = "scrypt") -> str:
    """Hash a password with werkzeug (scrypt by default)."""
    return generate_password_hash(password, method=method)


def verify_password(user: User | None, password: str, method: str = "scrypt") -> bool:
    """Check a password against the user's stored hash.

    For an unknown user (``None``) the check still runs, against a fixed hash made with
    ``method``, and fails: the answer takes as long as for a real account, so timing does
    not tell which emails exist.
    """
    if user is None:
        check_password_hash(_dummy_hash(method), password)
        return False
    return check_password_hash(user.password_hash, password)


@functools.cache
def _dummy_hash(method: str) -> str:
    return generate_password_hash("monark: no such user", method=method)


def memberships_of(user_id: int) -> list[Membership]:
    """A user's memberships, oldest first, with their orgs loaded."""
    stmt = (
        db.select(Membership)
        .where(Membership.user_id == user_id)
        .options(db.joinedload(Membership.org))
        .order_by(Membership.id)
    )
    return list(db.session.scalars(stmt))


def _session_principal() -> Principal | None:
    if not current_user.is_authenticated:
        return None
    org_id = session.get("org_id")
    membership = None
    if org_id is not None:
        membership = db.session.scalar(
            db.select(Membership).where(
                Membership.user_id == current_user.id, Membership.org_id == org_id
            )
        )
    if membership is None:
        membership = db.session.scalar(
            db.select(Membership)
            .where(Membership.user_id == current_user.id)
            .order_by(Membership.id)
        )
        if membership is None:
            return None
        session["org_id"] = membership.org_id
    return Principal.for_user(current_user.id, membership.org_id, membership.role)


def in_process() -> bool:
    """Whether this request is an in-process call (``monark.api.dispatch``): its principal
    is bound by the server, and its answer goes back to Python, never to a browser."""
    return request.environ.get(PRINCIPAL_ENVIRON_KEY) is not None


class CookieSessions(SecureCookieSessionInterface):
    """Flask's signed-cookie session, skipped for in-process calls: they carry no cookie
    and must set none, so they get an empty session and nothing is signed either way."""

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if request.environ.get(PRINCIPAL_ENVIRON_KEY) is not None:
            return self.session_class()
        return super().open_session(app, request)

    def save_session(self, app: Flask, session: SessionMixin, response: Response) -> None:
        if not in_process():
            super().save_session(app, session, response)


def current_principal() -> Principal | None:
    """The principal of this request, resolved once: dispatcher, API key, then session."""
    # Cached on the request, not on ``g``: an in-process call runs inside another request's
    # app context, and must resolve its own principal.
    cached = getattr(request, "_monark_principal", _UNRESOLVED)
    if cached is not _UNRESOLVED:
        return cached
    principal = request.environ.get(PRINCIPAL_ENVIRON_KEY)
    if principal is None:
        header = request.headers.get("Authorization", "")
        if header[:7].lower() == "bearer " and request.path.startswith("/api/"):
            principal = authenticate_key(header[7:].strip())
            if principal is None:
                raise Unauthorized(
                    "The API key is invalid or has been revoked (or its creator left the org)."
                )
        else:
            principal = _session_principal()
    request._monark_principal = principal
    return principal


def guard(permission: str | None = None) -> Callable[[F], F]:
    """Require a signed-in principal and, when given, a permission."""

    def decorator(view: F) -> F:
        @functools.wraps(view)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            principal = current_principal()
            if principal is None:
                if wants_json():
                    raise Unauthorized("Sign in or send an API key (Authorization: Bearer mrk_…).")
                target = request.full_path.rstrip("?")
                if is_htmx():
                    # An htmx swap would put the login page inside the page: reload instead,
                    # back to the page the user is on once they have signed in.
                    path = urlsplit(current_url()).path or "/"
                    return reload(url_for("auth.login", next=path))
                return redirect(url_for("auth.login", next=target))
            if permission:
                principal.require(permission)
            return view(*args, **kwargs)

        return wrapped  # type: ignore[return-value]

    return decorator


def require_principal() -> Principal:
    """The current principal inside a guarded view (never None there)."""
    principal = current_principal()
    if principal is None:
        raise Unauthorized("Not signed in.")
    return principal
