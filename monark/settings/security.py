"""The profile's security: two-factor sign-in (enrol, new recovery codes, turn off), the signed-in
sessions (sign out one, or all but this one), and the org's requirement of two-factor for
owners and admins (owners only). Views on the settings blueprint (``settings/views.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from flask import current_app, flash, redirect, render_template, request, session, url_for
from flask_login import login_user

from monark.core import sessions, two_factor
from monark.core.errors import Forbidden, ValidationFailed
from monark.core.events import record_event
from monark.core.models import Org, User
from monark.core.rbac import Principal
from monark.core.signin import TooManyProofs, counted_proof
from monark.core.two_factor import Fields
from monark.core.web import see_other
from monark.extensions import db

T = TypeVar("T")
ENROL_KEY = "two_factor_enrol"  # the secret being enrolled, signed (``two_factor.enrol_token``)
NO_STORE = {"Cache-Control": "no-store"}


def _user(principal: Principal) -> User:
    return db.session.get(User, principal.user_id)


def _enrol_page(user: User, secret: str, errors: dict[str, str], status: int):
    uri = two_factor.provisioning_uri(secret, user.email)
    page = render_template(
        "settings/two_factor.html",
        qr=two_factor.qr_svg(uri),
        secret=two_factor.grouped(secret),
        errors=errors,
        codes=None,
    )
    return page, status, NO_STORE  # it shows the secret


def enrol(principal: Principal):
    """Set up two-factor: the QR code and the secret as text, confirmed with a code; then the
    ten recovery codes, shown in this answer only."""
    user = _user(principal)
    if user.two_factor:
        return see_other("settings.profile", _anchor="two-factor")
    secret = two_factor.enrol_secret(session.get(ENROL_KEY), user.id)
    if request.method == "GET":
        if secret is None:
            secret = two_factor.new_secret()
            session[ENROL_KEY] = two_factor.enrol_token(secret, user.id)
        return _enrol_page(user, secret, {}, 200)
    if secret is None:
        flash("That took too long: scan this new code and try again.", "error")
        return redirect(url_for("settings.two_factor"))
    try:
        with counted_proof(user, ("password",)):
            codes = two_factor.enrol(
                principal,
                user,
                secret,
                request.form.get("code", ""),
                request.form.get("password", ""),
                str(current_app.config["PASSWORD_HASH_METHOD"]),
            )
    except TooManyProofs as err:
        page, status, headers = _enrol_page(user, secret, err.field_errors(), err.status)
        return page, status, headers | err.headers
    except ValidationFailed as err:
        return _enrol_page(user, secret, err.field_errors(), 422)
    session.pop(ENROL_KEY, None)
    # As a new password does: a session signed in with the password alone, perhaps by
    # whoever made the user turn this on, ends now.
    return _codes_page(codes, enrolled=True, signed_out=_sign_out_others(user))


def _codes_page(codes: list[str], enrolled: bool, signed_out: int = 0):
    page = render_template(
        "settings/two_factor.html",
        codes=codes,
        errors={},
        enrolled=enrolled,
        signed_out=signed_out,
    )
    return page, 201, NO_STORE


def _with_proof(principal: Principal, act: Callable[..., T], fields: Fields) -> T:
    """Run ``act(principal, user, password, code, method)`` with the form's password and code
    fields ``fields``, counted as sign-in attempts are; ``ValidationFailed`` (nothing changed,
    rolled back) for the view to draw beside the fields."""
    user = _user(principal)
    password_field, code_field = fields
    try:
        with counted_proof(user, fields):
            return act(
                principal,
                user,
                request.form.get(password_field, ""),
                request.form.get(code_field, ""),
                str(current_app.config["PASSWORD_HASH_METHOD"]),
            )
    except ValidationFailed:
        db.session.rollback()
        raise


def renew_codes(principal: Principal):
    """Ten new recovery codes (the old ones stop working), with the password or a code."""
    fields = ("recovery_password", "recovery_code")
    codes = _with_proof(principal, two_factor.renew_recovery_codes, fields)
    return _codes_page(codes, enrolled=False)


def disable(principal: Principal):
    """Turn two-factor off, with the password (or a code)."""
    _with_proof(principal, two_factor.disable, ("disable_password", "disable_code"))
    flash("Two-factor sign-in is off.", "info:two-factor")
    return see_other("settings.profile", _anchor="two-factor")


def revoke_session(principal: Principal, session_id: int):
    """Sign out one of the user's sessions (another user's: 404)."""
    sessions.revoke(principal.user_id, session_id)
    record_event(
        principal, "user.sessions_revoked", "user", principal.user_id, {"ids": [session_id]}
    )
    db.session.commit()
    flash("That session is signed out.", "info:sessions")
    return see_other("settings.profile", _anchor="sessions")


def _sign_out_others(user: User) -> int:
    """End every session of ``user`` but this one, old cookies without a row included; how
    many rows ended. Commits."""
    count = sessions.revoke_all(user.id, keep=sessions.current_id())
    # A new session version also ends a cookie from before session rows.
    user.session_version = (user.session_version or 0) + 1
    db.session.commit()
    login_user(user)  # this session, under the new version (its row stays)
    return count


def revoke_others(principal: Principal):
    """Sign out every other session of the user, old cookies without a row included."""
    user = _user(principal)
    record_event(principal, "user.sessions_revoked", "user", user.id, {"fields": ["sessions"]})
    count = _sign_out_others(user)
    said = "1 other session is" if count == 1 else f"{count} other sessions are"
    flash(f"{said} signed out.", "info:sessions")
    return see_other("settings.profile", _anchor="sessions")


def set_requirement(principal: Principal, required: bool) -> Org:
    """Whether the org requires two-factor of its owners and admins (owners decide); an owner
    turns it on only once their own is on. Commits."""
    principal.require("org.manage")
    if principal.role != "owner":
        raise Forbidden("Only owners may change whether two-factor sign-in is required.")
    org = db.session.get(Org, principal.org_id)
    if required and not _user(principal).two_factor:
        raise ValidationFailed(
            "Set up your own first.",
            [
                {
                    "field": "require_two_factor",
                    "message": "Set up two-factor sign-in for yourself first (on your profile).",
                }
            ],
        )
    if org.require_two_factor != required:
        org.require_two_factor = required
        record_event(principal, "org.updated", "org", org.id, {"fields": ["require_two_factor"]})
    db.session.commit()
    return org
