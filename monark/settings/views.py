"""Org settings, members and invitations (admins), API keys (admins) and the profile page
(everyone). The invitee's side of an invitation is in ``monark.settings.joining``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, flash, redirect, render_template, request, url_for
from markupsafe import Markup

from monark.core import accounts, keys, mail, sessions, two_factor, zones
from monark.core.auth import guard, require_principal
from monark.core.errors import ValidationFailed
from monark.core.htmx import redirect_full
from monark.core.models import User
from monark.core.rbac import Principal, roles_up_to
from monark.core.signin import TooManyProofs, counted_proof
from monark.core.web import see_other
from monark.extensions import db
from monark.notifications import services as notification_services
from monark.settings import (
    allowance_settings,
    four_eyes,
    joining,
    key_revocation,
    members,
    security,
    services,
    usage,
)

bp = Blueprint("settings", __name__)
# The org's on/off settings, each a checkbox of its form.
ORG_SWITCHES = ("chat_enabled", "ai_agent_enabled", "branding_enabled")


def _shown_once(page: tuple[str, int]) -> tuple[str, int, dict[str, str]]:
    """A page holding a secret (a new key or invitation link) that goes out only in this answer:
    never into the (signed, readable) session cookie, never into a cache. Its form is boosted,
    so the address bar keeps the form's URL and a reload is a GET that creates nothing."""
    return (*page, {"Cache-Control": "no-store"})


def org_page(
    errors: dict[str, str] | None = None,
    status: int = 200,
    *,
    invite_errors: dict[str, str] | None = None,
    new_invite: tuple[str, str] | None = None,
    approval_errors: list[str] | None = None,
    four_eyes_errors: list[str] | None = None,
    two_factor_errors: dict[str, str] | None = None,
    **shown: Any,
):
    """The settings page; a refused form (settings or invitation) comes back as typed, the
    other one as stored; a refused section says why beside its field (``shown``: what a
    section of its own draws, such as the time zone's)."""
    principal = require_principal()
    return render_template(
        "settings/org.html",
        org_row=services.get_org(principal),
        members=services.list_members(principal),
        invites=members.list_pending_invites(principal),
        # Roles at or below the admin's own (only owners invite owners, or make them).
        grantable_roles=roles_up_to(principal.role),
        approval_tools=four_eyes.always_ask_candidates(),
        errors=errors or {},
        invite_errors=invite_errors or {},
        new_invite=new_invite,
        form=request.form if errors else None,
        invite_form=request.form if invite_errors else {},
        four_eyes_tools=four_eyes.four_eyes_candidates(),
        approval_errors=approval_errors or [],
        four_eyes_errors=four_eyes_errors or [],
        two_factor_errors=two_factor_errors or {},
        **shown,
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
            return org_page(err.field_errors(), 422)
        flash("Settings saved.", "info:organization")
        # The header shows the org and assistant names and the panel its switches.
        return redirect_full(url_for("settings.org_settings"))
    return org_page()


def _with_article(role: str) -> str:
    """A role as a sentence ends with it: "an owner", "a member"."""
    return f"{'an' if role[:1] in 'aeiou' else 'a'} {role}"


def _say_switched_off(count: int) -> None:
    """Say how many automations the change switched off, linking to them."""
    if not count:
        return
    what = "1 automation they owned was" if count == 1 else f"{count} automations they owned were"
    said = Markup(
        '{} switched off (an automation acts within its owner\'s rights). <a href="{}">{}</a>'
    )
    link = url_for("automations.index", state="needs_owner")
    flash(said.format(what, link, "See automations that need an owner"), "warning:members")


def _member_change(change: Callable[[Principal], tuple[int, str]]):
    """Run a change to one membership (``change`` answers whose and what to say), say why
    not when it is refused, and which of their automations it switched off."""
    principal = require_principal()
    since = services.last_event_id()
    try:
        user_id, said = change(principal)
    except ValidationFailed as err:
        flash(err.detail_text(), "error:members")
    else:
        flash(said, "info:members")
        _say_switched_off(services.switched_off_since(principal, user_id, since))
    return see_other("settings.org_settings", _anchor="members")


@bp.post("/settings/members/<int:membership_id>/role")
@guard("org.manage")
def member_role(membership_id: int):
    """Change a member's role."""

    def change(principal: Principal) -> tuple[int, str]:
        membership = services.change_role(principal, membership_id, request.form.get("role", ""))
        role = _with_article(membership.role)
        return membership.user_id, f"{membership.user.name} is now {role}."

    return _member_change(change)


@bp.post("/settings/members/<int:membership_id>/remove")
@guard("org.manage")
def member_remove(membership_id: int):
    """Take a member out of the org."""

    def change(principal: Principal) -> tuple[int, str]:
        user = members.remove_member(principal, membership_id)
        return user.id, f"{user.name} was removed from the organization."

    return _member_change(change)


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
        return org_page(invite_errors=err.field_errors(), status=422)
    link = mail.link("settings.invite_link", token=token)
    mail.send(
        "invite",
        invite.email,
        org=invite.org.name,
        inviter=invite.created_by.name if invite.created_by else "An admin",
        role=invite.role,
        # The invitee has no zone of their own yet: the org's default is theirs to be.
        expires=zones.written(invite.expires_at, zones.org_zone(principal.org_id)),
        link=link,
    )
    return _shown_once(org_page(new_invite=(invite.email, link), status=201))


@bp.post("/settings/invites/<int:invite_id>/revoke")
@guard("org.manage")
def invite_revoke(invite_id: int):
    """Revoke a pending invitation."""
    invite = members.revoke_invite(require_principal(), invite_id)
    flash(f"The invitation for {invite.email} was revoked.", "info:invites")
    return see_other("settings.org_settings", _anchor="invites")


# The invitee's side lives in ``monark.settings.joining``, on this blueprint.
bp.add_url_rule("/invite/<token>", view_func=joining.invite_link, methods=["GET"])
bp.add_url_rule("/invite", view_func=joining.invite, methods=["GET", "POST"])


# ---- approvals: four eyes, allowances and always-ask (admins) ---------------------------


@bp.post("/settings/four-eyes", endpoint="four_eyes")
@guard("org.manage")
def four_eyes_settings():
    """Save the four-eyes tools from the settings page."""
    try:
        chosen = four_eyes.update_four_eyes(require_principal(), request.form.getlist("four_eyes"))
    except ValidationFailed as err:
        return org_page(four_eyes_errors=[d["message"] for d in err.details], status=422)
    said = f"Saved: four eyes on for {', '.join(chosen)}." if chosen else "Saved: four eyes is off."
    flash(said, "info:four-eyes")
    return see_other("settings.org_settings", _anchor="four-eyes")


@bp.post("/settings/approvals")
@guard("org.manage")
def approval_settings():
    """Save whether allowances are offered and which tools always ask."""
    form = request.form
    try:
        allowance_settings.update_approval_settings(
            require_principal(),
            allowances_enabled=form.get("chat_allowances_enabled") == "on",
            always_confirm=form.getlist("chat_always_confirm"),
        )
    except ValidationFailed as err:
        return org_page(approval_errors=[d["message"] for d in err.details], status=422)
    flash("Approval settings saved.", "info:approvals")
    # No anchor: a reload of /settings#approvals from /settings would only scroll, showing
    # nothing; the page brings the section its message is in into view itself.
    return redirect_full(url_for("settings.org_settings"))


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
                principal,
                request.form.get("name", ""),
                request.form.get("role", ""),
                writes_need_approval=request.form.get("writes_need_approval") == "on",
            )
        except ValidationFailed as err:
            return _keys_page(errors=err.field_errors(), status=422)
        flash(f"Key {key.name} created. Copy it now: it is not shown again.", "info")
        return _shown_once(_keys_page(new_token=token, status=201))
    return _keys_page()


@bp.post("/settings/api-keys/<int:key_id>/revoke")
@guard("apikeys.manage")
def api_key_revoke(key_id: int):
    """Revoke a key; calls with it fail from now on, and its held writes are rejected."""
    key = key_revocation.revoke_key(require_principal(), key_id)
    flash(f"Key {key.name} revoked.", "info")
    return see_other("settings.api_keys")


@bp.route("/profile", methods=["GET", "POST"])
@guard()
def profile():
    """The user's own settings: their AI assistant switch, password and email."""
    principal = require_principal()
    if request.method == "POST":
        services.set_user_ai_agent(principal, request.form.get("ai_agent_enabled") == "on")
        flash("Profile saved.", "info")
        # The user's assistant switch opens or closes the header button and the panel.
        return redirect_full(url_for("settings.profile"))
    return profile_page()


def profile_page(errors: dict[str, str] | None = None, status: int = 200, **shown: Any):
    """The profile page; a refused form's errors beside its fields."""
    principal = require_principal()
    user = db.session.get(User, principal.user_id)
    page = render_template(
        "settings/profile.html",
        user=user,
        recovery_left=two_factor.recovery_left(user.id) if user.two_factor else 0,
        user_sessions=sessions.active(user.id, sessions.current_id()),
        errors=errors or {},
        report=usage.report(principal, usage.period(request.args.get("days")), own=True),
        periods=usage.PERIODS,
        notification_prefs=notification_services.preference_rows(principal.user_id),
        **shown,
    )
    return page, status


def refused_on_profile(err: ValidationFailed, **shown: Any):
    """The profile with a refused form's errors: 422, or 429 (with ``Retry-After``) when
    too many wrong passwords or codes came (``signin.counted_proof``)."""
    page, status = profile_page(err.field_errors(), 422, **shown)
    if isinstance(err, TooManyProofs):
        return page, err.status, err.headers
    return page, status


@bp.post("/profile/password")
@guard()
def profile_password():
    """Change the password (the current one required); the user's other sessions end."""
    principal = require_principal()
    user = db.session.get(User, principal.user_id)
    try:
        with counted_proof(user, ("current_password",)):
            accounts.change_password(
                principal,
                user,
                request.form.get("current_password", ""),
                request.form.get("new_password", ""),
            )
    except ValidationFailed as err:
        return refused_on_profile(err)
    # This session, under the new session version and a row of its own: it stays signed in.
    sessions.begin(user)
    flash("Password changed. Your other sessions are signed out.", "info:password")
    return see_other("settings.profile", _anchor="password")


@bp.post("/profile/email")
@guard()
def profile_email():
    """Ask to change the email: a confirmation link goes to the new address."""
    user = db.session.get(User, require_principal().user_id)
    try:
        with counted_proof(user, ("email_password",)):
            sent_to = accounts.request_email_change(
                user, request.form.get("email", ""), request.form.get("email_password", "")
            )
    except ValidationFailed as err:
        return refused_on_profile(err, new_email=request.form.get("email", ""))
    flash(f"A link to confirm {sent_to} is on its way there.", "info:email")
    return see_other("settings.profile", _anchor="email")


# ---- security: two-factor sign-in, sessions (``settings/security.py``) ---------------------


@bp.route("/profile/two-factor", methods=["GET", "POST"], endpoint="two_factor")
@guard()
def two_factor_enrol():
    """Set up two-factor sign-in: scan, confirm with a code, keep the recovery codes."""
    return security.enrol(require_principal())


@bp.post("/profile/two-factor/disable")
@guard()
def two_factor_disable():
    """Turn two-factor sign-in off (the password, or a code, required)."""
    return _on_profile(security.disable)


@bp.post("/profile/two-factor/recovery-codes")
@guard()
def two_factor_recovery_codes():
    """Ten new recovery codes in place of the old ones (the password, or a code, required)."""
    return _on_profile(security.renew_codes)


def _on_profile(act: Callable[[Principal], Any]):
    """``act``'s answer for the signed-in principal, or the profile with its refusal."""
    try:
        return act(require_principal())
    except ValidationFailed as err:
        return refused_on_profile(err)


@bp.post("/profile/sessions/<int:session_id>/revoke")
@guard()
def session_revoke(session_id: int):
    """Sign out one of the user's sessions."""
    return security.revoke_session(require_principal(), session_id)


@bp.post("/profile/sessions/revoke-others")
@guard()
def sessions_revoke_others():
    """Sign out every session of the user but this one."""
    return security.revoke_others(require_principal())


@bp.post("/settings/two-factor", endpoint="two_factor_requirement")
@guard("org.manage")
def two_factor_requirement():
    """Whether owners and admins must sign in with two factors (owners only)."""
    required = request.form.get("require_two_factor") == "on"
    try:
        security.set_requirement(require_principal(), required)
    except ValidationFailed as err:
        return org_page(two_factor_errors=err.field_errors(), status=422)
    said = "required for owners and admins" if required else "not required"
    flash(f"Saved: two-factor sign-in is {said}.", "info:two-factor")
    return see_other("settings.org_settings", _anchor="two-factor")
