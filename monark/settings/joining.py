"""Joining an org: the invitee's side of an invitation, from its link to the membership.

Its views sit on the settings blueprint (``settings.invite_link``, ``settings.invite``); the
admin's side (making and revoking invitations) is in ``monark.settings.views``.
"""

from __future__ import annotations

from flask import current_app, flash, render_template, request, session, url_for
from flask_login import current_user

from monark.core import sessions, two_factor
from monark.core.errors import AppError, ValidationFailed
from monark.core.signin import PENDING_KEY, check_password
from monark.core.web import see_other
from monark.settings import members

# The invitation token lives in the (signed) session between its link and the join: an
# address is written to access logs, browser history and Referer headers; a cookie is not.
INVITE_SESSION_KEY = "invite_token"
MAX_TOKEN_LENGTH = 64  # a real one is 36 characters; longer would only bloat the cookie
# An invitation's pages are neither cached nor named in a Referer: they hold or name it.
PRIVATE = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}


def _invite_gone(message: str):
    return render_template("settings/invite.html", view=None, gone=message), 404


def invite_link(token: str):
    """An invitation link: keep its token in the session and go on to ``/invite`` without it."""
    if len(token) > MAX_TOKEN_LENGTH:
        return _invite_gone(members.GONE_MESSAGE)
    session[INVITE_SESSION_KEY] = token  # a second link replaces the first
    response = see_other("settings.invite")
    response.headers.update(PRIVATE)
    return response


def invite():
    """Accept an invitation: signed in as the invitee, with its password, or a new account."""
    token = session.get(INVITE_SESSION_KEY)
    if not token:
        return _invite_gone(
            "No invitation is open in this browser. Open the invitation link you were sent."
        )
    try:
        view = members.find_invite(token)
    except AppError as err:
        session.pop(INVITE_SESSION_KEY, None)
        return _invite_gone(err.message)
    errors: dict[str, str] = {}
    status = 200
    if request.method == "POST":
        try:
            membership = _accept(view)
        except CodeFirst:
            # The account signs in with two factors: its code first, then this page again,
            # signed in, where it joins as itself.
            return see_other("auth.login_code")
        except ValidationFailed as err:
            errors, status = err.field_errors(), 422
        except AppError as err:
            errors, status = {"form": err.message}, err.status
        else:
            session.pop(INVITE_SESSION_KEY, None)
            session["org_id"] = membership.org_id
            flash(f"Welcome to {view.org.name}.", "info")
            return see_other("records.home")
    page = render_template("settings/invite.html", view=view, errors=errors, form=request.form)
    return page, status, PRIVATE  # it names the invitee


def _accept(view: members.InviteView):
    if current_user.is_authenticated:
        return members.accept_as(view, current_user._get_current_object())
    method = current_app.config["PASSWORD_HASH_METHOD"]
    if view.account is None:
        membership = members.accept_new_account(
            view, request.form.get("name", ""), request.form.get("password", ""), method
        )
        sessions.begin(membership.user)
        return membership
    # An existing account proves itself with its password, limited like sign-in.
    password = request.form.get("password", "")
    check = check_password(view.account, view.invite.email, password, request.remote_addr, method)
    if check.retry_after:
        raise ValidationFailed(
            "Too many attempts.",
            [{"field": "password", "message": "Too many attempts; try again in a few minutes."}],
        )
    if not check.ok:
        raise ValidationFailed(
            "Wrong password.", [{"field": "password", "message": "That password is not right."}]
        )
    if view.account.two_factor:
        session[PENDING_KEY] = two_factor.pending(view.account, url_for("settings.invite"))
        raise CodeFirst()
    membership = members.accept_as(view, view.account)
    sessions.begin(view.account)
    return membership


class CodeFirst(Exception):
    """The right password of an account that also needs its two-factor code."""
