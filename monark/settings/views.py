"""Org settings (admins), API keys (admins) and the profile page (everyone)."""

from __future__ import annotations

from flask import Blueprint, flash, make_response, redirect, render_template, request, url_for

from monark.api import keys
from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.htmx import redirect_full
from monark.core.models import User
from monark.core.rbac import ROLES
from monark.extensions import db
from monark.settings import services

bp = Blueprint("settings", __name__)


def _org_page(errors: dict[str, str] | None = None, status: int = 200):
    principal = require_principal()
    return render_template(
        "settings/org.html",
        org_row=services.get_org(principal),
        members=services.list_members(principal),
        roles=ROLES,
        errors=errors or {},
        form=request.form if request.method == "POST" else None,
    ), status


@bp.route("/settings", methods=["GET", "POST"])
@guard("org.manage")
def org_settings():
    """Org name, chat module, AI assistant and branding; the member list."""
    principal = require_principal()
    if request.method == "POST":
        form = request.form
        try:
            services.update_org_settings(
                principal,
                name=form.get("name", ""),
                chat_enabled=form.get("chat_enabled") == "on",
                ai_agent_enabled=form.get("ai_agent_enabled") == "on",
                branding_enabled=form.get("branding_enabled") == "on",
                assistant_name=form.get("assistant_name", ""),
            )
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
        flash("; ".join(d["message"] for d in err.details), "error")
    else:
        flash(f"{membership.user.name} is now {membership.role}.", "info")
    return redirect(url_for("settings.org_settings"), 303)


def _keys_page(new_token: str | None = None, errors=None, status: int = 200):
    principal = require_principal()
    allowed = ROLES[ROLES.index(principal.role) :] if principal.role in ROLES else ()
    return render_template(
        "settings/api_keys.html",
        keys=keys.list_keys(principal),
        roles=allowed,
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
        # The token goes out in this response only: never into the (signed, readable)
        # session cookie, never into a cache. The form is boosted, so the address bar
        # keeps /settings/api-keys and a reload is a GET that creates nothing.
        response = make_response(_keys_page(new_token=token, status=201))
        response.headers["Cache-Control"] = "no-store"
        return response
    return _keys_page()


@bp.post("/settings/api-keys/<int:key_id>/revoke")
@guard("apikeys.manage")
def api_key_revoke(key_id: int):
    """Revoke a key; calls with it fail from now on."""
    key = keys.revoke_key(require_principal(), key_id)
    flash(f"Key {key.name} revoked.", "info")
    return redirect(url_for("settings.api_keys"), 303)


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
