"""Org settings (admins), API keys (admins) and the profile page (everyone)."""

from __future__ import annotations

from typing import Any

from flask import (
    Blueprint,
    Response,
    current_app,
    flash,
    make_response,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask_login import current_user, login_user

from monark.core import keys
from monark.core.auth import guard, require_principal
from monark.core.errors import AppError, ValidationFailed
from monark.core.htmx import redirect_full
from monark.core.models import User
from monark.core.rbac import roles_up_to
from monark.core.throttle import check_password
from monark.core.web import see_other
from monark.extensions import db
from monark.settings import members, services

bp = Blueprint("settings", __name__)
# The org's on/off settings, each a checkbox of its form.
ORG_SWITCHES = ("chat_enabled", "ai_agent_enabled", "branding_enabled")


def _shown_once(page: tuple[str, int]) -> Response:
    """A page holding a secret (a new key or invitation link) that goes out only in this answer:
    never into the (signed, readable) session cookie, never into a cache. Its form is boosted,
    so the address bar keeps the form's URL and a reload is a GET that creates nothing."""
    response = make_response(page)
    response.headers["Cache-Control"] = "no-store"
    return response


def _org_page(
    errors: dict[str, str] | None = None,
    status: int = 200,
    *,
    invite_errors: dict[str, str] | None = None,
    new_invite: tuple[str, str] | None = None,
):
    """The settings page; a refused form (settings or invitation) comes back as typed, the
    other one as stored."""
    principal = require_principal()
    return render_template(
        "settings/org.html",
        org_row=services.get_org(principal),
        members=services.list_members(principal),
        invites=members.list_pending_invites(principal),
        # Roles at or below the admin's own (only owners invite owners, or make them).
        grantable_roles=roles_up_to(principal.role),
        errors=errors or {},
        invite_errors=invite_errors or {},
        new_invite=new_invite,
        form=request.form if errors else None,
        invite_form=request.form if invite_errors else {},
    ), status


def _settings_form() -> dict[str, Any]:
    """The settings form, as ``update_org_settings`` takes it."""
    form = request.form
    return {
        "name": form.get("name", ""),
        "assistant_name": form.get("assistant_name", ""),
        **{switch: form.get(switch) == "on" for switch in ORG_SWITCHES},
    }


@bp.route("/settings", methods=["GET", "POST"])
@guard("org.manage")
def org_settings():
    """Org name, chat module, AI assistant and branding; the member list."""
    if request.method == "POST":
        try:
            services.update_org_settings(require_principal(), **_settings_form())
        except ValidationFailed as err:
            return _org_page(err.field_errors(), 422)
        flash("Settings saved.", "info")
        # The header shows the org and assistant names and the panel its switches.
        return redirect_full(url_for("settings.org_settings"))
    return _org_page()


@bp.post("/settings/members/<int:membership_id>/role")
@guard("org.manage")
def member_role(membership_id: int):
    """Change a member's role."""
    principal = require_principal()
    try:
        membership = services.change_role(principal, membership_id, request.form.get("role", ""))
    except ValidationFailed as err:
        flash(err.detail_text(), "error")
    else:
        flash(f"{membership.user.name} is now {membership.role}.", "info")
    return see_other("settings.org_settings")


@bp.post("/settings/members/<int:membership_id>/remove")
@guard("org.manage")
def member_remove(membership_id: int):
    """Take a member out of the org."""
    principal = require_principal()
    try:
        user = members.remove_member(principal, membership_id)
    except ValidationFailed as err:
        flash(err.detail_text(), "error")
    else:
        flash(f"{user.name} was removed from the organization.", "info")
    return see_other("settings.org_settings")


@bp.route("/settings/invites", methods=["GET", "POST"])
@guard("org.manage")
def invite_create():
    """Invite someone by email; the one-time link is shown in this answer only."""
    principal = require_principal()
    if request.method == "GET":  # a reload of the boosted form's answer
        return redirect(url_for("settings.org_settings", _anchor="invites"))
    try:
        invite, token = members.create_invite(
            principal, request.form.get("email", ""), request.form.get("role", "")
        )
    except ValidationFailed as err:
        return _org_page(invite_errors=err.field_errors(), status=422)
    link = url_for("settings.invite_link", token=token, _external=True)
    return _shown_once(_org_page(new_invite=(invite.email, link), status=201))


@bp.post("/settings/invites/<int:invite_id>/revoke")
@guard("org.manage")
def invite_revoke(invite_id: int):
    """Revoke a pending invitation."""
    invite = members.revoke_invite(require_principal(), invite_id)
    flash(f"The invitation for {invite.email} was revoked.", "info")
    return see_other("settings.org_settings")


# The invitation token lives in the (signed) session between its link and the join: an
# address is written to access logs, browser history and Referer headers; a cookie is not.
INVITE_SESSION_KEY = "invite_token"
MAX_TOKEN_LENGTH = 64  # a real one is 36 characters; longer would only bloat the cookie


def _invite_gone(message: str):
    return render_template("settings/invite.html", view=None, gone=message), 404


@bp.get("/invite/<token>")
def invite_link(token: str):
    """An invitation link: keep its token in the session and go on to ``/invite`` without it."""
    if len(token) > MAX_TOKEN_LENGTH:
        return _invite_gone(members.GONE_MESSAGE)
    session[INVITE_SESSION_KEY] = token  # a second link replaces the first
    response = see_other("settings.invite")
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


@bp.route("/invite", methods=["GET", "POST"])
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
        except ValidationFailed as err:
            errors, status = err.field_errors(), 422
        except AppError as err:
            errors, status = {"form": err.message}, err.status
        else:
            session.pop(INVITE_SESSION_KEY, None)
            session["org_id"] = membership.org_id
            flash(f"Welcome to {view.org.name}.", "info")
            return see_other("records.home")
    response = make_response(
        render_template("settings/invite.html", view=view, errors=errors, form=request.form),
        status,
    )
    response.headers["Cache-Control"] = "no-store"  # it names the invitee
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def _accept(view: members.InviteView):
    if current_user.is_authenticated:
        return members.accept_as(view, current_user._get_current_object())
    method = current_app.config["PASSWORD_HASH_METHOD"]
    if view.account is None:
        membership = members.accept_new_account(
            view, request.form.get("name", ""), request.form.get("password", ""), method
        )
        login_user(membership.user)
        return membership
    # An existing account proves itself with its password, throttled like sign-in.
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
    membership = members.accept_as(view, view.account)
    login_user(view.account)
    return membership


def _keys_page(new_token: str | None = None, errors=None, status: int = 200):
    principal = require_principal()
    return render_template(
        "settings/api_keys.html",
        keys=keys.list_keys(principal),
        roles=roles_up_to(principal.role),
        new_token=new_token,
        errors=errors or {},
        form=request.form if request.method == "POST" else None,
    ), status


@bp.route("/settings/api-keys", methods=["GET", "POST"])
@guard("apikeys.manage")
def api_keys():
    """List, create (shown once) and revoke API keys."""
    principal = require_principal()
    if request.method == "POST":
        try:
            key, token = keys.create_key(
                principal, request.form.get("name", ""), request.form.get("role", "")
            )
        except ValidationFailed as err:
            return _keys_page(errors=err.field_errors(), status=422)
        flash(f"Key {key.name} created. Copy it now: it is not shown again.", "info")
        return _shown_once(_keys_page(new_token=token, status=201))
    return _keys_page()


@bp.post("/settings/api-keys/<int:key_id>/revoke")
@guard("apikeys.manage")
def api_key_revoke(key_id: int):
    """Revoke a key; calls with it fail from now on."""
    key = keys.revoke_key(require_principal(), key_id)
    flash(f"Key {key.name} revoked.", "info")
    return see_other("settings.api_keys")


@bp.route("/profile", methods=["GET", "POST"])
@guard()
def profile():
    """The user's own settings: their AI assistant switch."""
    principal = require_principal()
    if request.method == "POST":
        services.set_user_ai_agent(principal, request.form.get("ai_agent_enabled") == "on")
        flash("Profile saved.", "info")
        # The user's assistant switch opens or closes the header button and the panel.
        return redirect_full(url_for("settings.profile"))
    return render_template("settings/profile.html", user=db.session.get(User, principal.user_id))
