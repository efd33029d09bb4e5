"""Getting back into an account: "Forgot password?", the reset link, and the link that
confirms a new email (the ``account`` blueprint; the forms that start a change are on the
profile, ``monark.settings.views``).

A link's token goes from its address into the signed session and the browser moves on
without it (as invitations do): an address is kept in history, logs and Referer headers.
"""

from __future__ import annotations

import math

from flask import Blueprint, flash, render_template, request, session
from flask_login import current_user, logout_user

from monark.core import accounts
from monark.core.auth import guard, require_principal
from monark.core.errors import AppError, ValidationFailed
from monark.core.web import see_other

bp = Blueprint("account", __name__)

RESET_KEY = "reset_token"
EMAIL_KEY = "email_token"
MAX_TOKEN = 400  # a real one is about 120 characters; longer would only bloat the cookie
# These pages hold or name a token: neither cached nor named in a Referer.
PRIVATE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def _gone(message: str, again: str):
    """The page of a link that no longer works, with the way to ask for another."""
    page = render_template("auth/link_gone.html", message=message, again=again)
    return page, 400, PRIVATE


def _stash(key: str, token: str, endpoint: str):
    session[key] = token[:MAX_TOKEN]  # a second link replaces the first
    response = see_other(endpoint)
    response.headers.update(PRIVATE)
    return response


@bp.route("/login/forgot", methods=["GET", "POST"])
def forgot():
    """Ask for a reset link; the answer never says whether the email has an account."""
    errors: dict[str, str] = {}
    email = request.form.get("email", "").strip() if request.method == "POST" else ""
    if request.method == "POST":
        if not email:
            errors["email"] = "Give the email you sign in with."
        elif wait := accounts.throttled(email.lower(), request.remote_addr):
            minutes = max(1, math.ceil(wait / 60))
            errors["email"] = f"Too many requests; try again in {minutes} minute(s)."
            page = render_template("auth/forgot.html", errors=errors, email=email)
            return page, 429, {"Retry-After": str(wait)}
        else:
            accounts.request_reset(email)
            return render_template("auth/forgot.html", sent_to=email, errors={}, email="")
    status = 422 if errors else 200
    return render_template("auth/forgot.html", errors=errors, email=email), status


@bp.get("/reset/<token>")
def reset_link(token: str):
    """A reset link: keep its token in the session and go on to ``/reset`` without it."""
    return _stash(RESET_KEY, token, "account.reset")


@bp.route("/reset", methods=["GET", "POST"])
def reset():
    """Choose a new password through the link in the session; every session is signed out."""
    token = session.get(RESET_KEY)
    if not token:
        return _gone("No reset link is open in this browser.", "account.forgot")
    try:
        user = accounts.reset_account(token)
    except accounts.LinkGone as err:
        session.pop(RESET_KEY, None)
        return _gone(err.message, "account.forgot")
    errors: dict[str, str] = {}
    if request.method == "POST":
        try:
            accounts.reset_password(token, request.form.get("password", ""))
        except ValidationFailed as err:
            errors = err.field_errors()
        except accounts.LinkGone as err:  # used in another tab a moment ago
            session.pop(RESET_KEY, None)
            return _gone(err.message, "account.forgot")
        else:
            session.pop(RESET_KEY, None)
            if current_user.is_authenticated:
                logout_user()
            flash("Your password was changed. Sign in with the new one.", "info")
            return see_other("auth.login")
    page = render_template("auth/reset.html", email=user.email, errors=errors)
    return page, 422 if errors else 200, PRIVATE


@bp.get("/email/<token>")
def email_link(token: str):
    """An email-change link: keep its token in the session, then ask to confirm."""
    return _stash(EMAIL_KEY, token, "account.email_confirm")


@bp.route("/email/confirm", methods=["GET", "POST"])
@guard()
def email_confirm():
    """Confirm the new email of the link in the session (signed in as its account)."""
    principal = require_principal()
    token = session.get(EMAIL_KEY)
    if not token:
        return _gone("No email-change link is open in this browser.", "settings.profile")
    try:
        change = accounts.email_change(token)
        if change.user.id != principal.user_id:
            raise accounts.LinkGone("This link is for another account: sign in as that one.")
        if request.method == "POST":
            accounts.confirm_email_change(principal, token)
    except AppError as err:
        session.pop(EMAIL_KEY, None)
        return _gone(err.message, "settings.profile")
    if request.method == "POST":
        session.pop(EMAIL_KEY, None)
        flash(f"Your email is now {change.new_email}.", "info")
        return see_other("settings.profile")
    page = render_template("auth/email_confirm.html", change=change)
    return page, 200, PRIVATE
