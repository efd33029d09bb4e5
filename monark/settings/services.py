"""Org settings and membership services."""

from __future__ import annotations

from sqlalchemy import func, select

from monark.core.errors import Forbidden, NotFound, ValidationFailed
from monark.core.events import record_event
from monark.core.models import Event, Membership, Org, User
from monark.core.rbac import ROLE_PERMISSIONS, ROLES, Principal
from monark.core.text import ONE_LINE_RULE, unsafe_in_one_line
from monark.core.uow import for_update
from monark.extensions import db


def get_org(principal: Principal) -> Org:
    """The principal's org."""
    org = db.session.get(Org, principal.org_id)
    if org is None:
        raise NotFound("No such organization.")
    return org


def update_org_settings(
    principal: Principal,
    *,
    name: str,
    chat_enabled: bool,
    ai_agent_enabled: bool,
    branding_enabled: bool,
    assistant_name: str,
) -> Org:
    """Save the org's name, chat module, AI assistant and branding switches."""
    principal.require("org.manage")
    org = get_org(principal)
    name = name.strip()
    assistant_name = assistant_name.strip()
    problems = []
    if not name or len(name) > 120:
        problems.append({"field": "name", "message": "Give the organization a name (1-120)."})
    elif unsafe_in_one_line(name):  # it heads mail and pages: one line, read as stored
        problems.append({"field": "name", "message": ONE_LINE_RULE})
    if len(assistant_name) > 60:
        problems.append({"field": "assistant_name", "message": "At most 60 characters."})
    elif unsafe_in_one_line(assistant_name):
        problems.append({"field": "assistant_name", "message": ONE_LINE_RULE})
    if branding_enabled and not assistant_name:
        problems.append(
            {"field": "assistant_name", "message": "Give a name, or turn branding off."}
        )
    if problems:
        raise ValidationFailed("The settings are invalid.", problems)
    changed = [
        key
        for key, value in (
            ("name", name),
            ("chat_enabled", chat_enabled),
            ("ai_agent_enabled", ai_agent_enabled),
            ("branding_enabled", branding_enabled),
            ("assistant_name", assistant_name or None),
        )
        if getattr(org, key) != value
    ]
    org.name = name
    org.chat_enabled = chat_enabled
    org.ai_agent_enabled = ai_agent_enabled
    org.branding_enabled = branding_enabled
    org.assistant_name = assistant_name or None
    if changed:
        record_event(principal, "org.updated", "org", org.id, {"fields": changed})
    db.session.commit()
    return org


def list_members(principal: Principal) -> list[Membership]:
    """The org's memberships with their users, by name."""
    principal.require("org.manage")
    stmt = (
        select(Membership)
        .join(User)
        .where(Membership.org_id == principal.org_id)
        .options(db.joinedload(Membership.user))
        .order_by(User.name)
    )
    return list(db.session.scalars(stmt))


def _owner_count(org_id: int) -> int:
    return db.session.scalar(
        select(func.count()).where(Membership.org_id == org_id, Membership.role == "owner")
    )


def get_membership(principal: Principal, membership_id: int) -> Membership:
    """A membership of the principal's org (for admins); ``NotFound`` otherwise."""
    principal.require("org.manage")
    membership = db.session.scalar(
        select(Membership).where(
            Membership.id == membership_id, Membership.org_id == principal.org_id
        )
    )
    if membership is None:
        raise NotFound("No such member.")
    return membership


def lock_members(principal: Principal) -> str:
    """Hold the org's row until commit, so membership changes take turns; the acting user's
    role as it is now (two owners removing each other at once must not both succeed)."""
    principal.require("org.manage")
    db.session.scalar(for_update(select(Org.id).where(Org.id == principal.org_id)))
    # Read after the lock: what the previous holder committed (a removal, a demotion).
    role = db.session.scalar(
        select(Membership.role).where(
            Membership.org_id == principal.org_id, Membership.user_id == principal.user_id
        )
    )
    if role is None or "org.manage" not in ROLE_PERMISSIONS[role]:
        raise Forbidden("You are no longer an admin of this organization.")
    return role


def change_role(principal: Principal, membership_id: int, role: str) -> Membership:
    """Give a member another role; only owners make or unmake owners; one owner stays."""
    acting_role = lock_members(principal)
    membership = get_membership(principal, membership_id)
    if role not in ROLES:
        raise ValidationFailed(
            "Unknown role.", [{"field": "role", "message": f"Choose one of: {', '.join(ROLES)}."}]
        )
    if "owner" in (role, membership.role) and acting_role != "owner":
        raise Forbidden("Only an owner can grant or remove the owner role.")
    if membership.role == "owner" and role != "owner" and _owner_count(principal.org_id) <= 1:
        raise ValidationFailed(
            "The last owner.",
            [{"field": "role", "message": "The organization needs at least one owner."}],
        )
    if membership.role != role:
        before, membership.role = membership.role, role
        record_event(
            principal,
            "member.role_changed",
            "membership",
            membership.id,
            {"user_id": membership.user_id, "fields": ["role"], "from": before, "to": role},
        )
    db.session.commit()
    return membership


def set_user_ai_agent(principal: Principal, enabled: bool) -> User:
    """The user's own AI assistant switch."""
    user = db.session.get(User, principal.user_id)
    if user is None:
        raise NotFound("No such user.")
    if user.ai_agent_enabled != enabled:
        user.ai_agent_enabled = enabled
        record_event(principal, "user.updated", "user", user.id, {"fields": ["ai_agent_enabled"]})
    db.session.commit()
    return user


def last_event_id() -> int:
    """The newest event's id: what a later ``switched_off_since`` counts from."""
    return db.session.scalar(select(func.max(Event.id))) or 0


def switched_off_since(principal: Principal, user_id: int, event_id: int) -> int:
    """How many of ``user_id``'s automations were switched off after event ``event_id``
    because they lost the right to own them (their ``automation.disabled`` events)."""
    payloads = db.session.scalars(
        select(Event.payload).where(
            Event.org_id == principal.org_id,
            Event.id > event_id,
            Event.type == "automation.disabled",
            Event.actor_kind == "automation",
        )
    )
    return sum(1 for p in payloads if (p or {}).get("owner_id") == user_id)
