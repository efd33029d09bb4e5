"""Joining and leaving an org: invitations (one-time links) and removing members.

An invitation is a random token shown once to the admin who made it, stored as its
SHA-256 digest (like API keys), valid for ``INVITE_DAYS`` and for one use. Whoever holds the
link joins with the invited role: under the invited email, either by creating the account
or by proving they own it (its password, or being signed in as it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from monark.core.accounts import password_problems
from monark.core.auth import hash_password
from monark.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from monark.core.events import record_event, save_new
from monark.core.models import Invite, Membership, Org, User, as_utc, utcnow
from monark.core.rbac import ROLE_PERMISSIONS, ROLES, Principal
from monark.core.text import ONE_LINE_RULE, unsafe_in_one_line
from monark.core.tokens import INVITES, new_token, revoke, token_digest
from monark.extensions import db
from monark.settings import notices
from monark.settings.services import get_membership, lock_members

INVITE_DAYS = 7
TOKEN_PREFIX = "inv_"
# Deliberately loose: one @, something on each side, a dot in the domain. Whether the
# address is real is the invitee's to prove by opening the link.
EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
GONE_MESSAGE = (
    "This invitation link is not valid any more: it was used, revoked or has expired. "
    "Ask for a new one."
)


def _problem(field: str, message: str, summary: str = "The invitation is invalid.") -> None:
    raise ValidationFailed(summary, [{"field": field, "message": message}])


# ---- the admin's side -------------------------------------------------------------------


def list_pending_invites(principal: Principal) -> list[Invite]:
    """The org's invitations not yet used, revoked or expired, newest first."""
    principal.require("org.manage")
    stmt = (
        select(Invite)
        .where(
            Invite.org_id == principal.org_id,
            Invite.accepted_at.is_(None),
            Invite.revoked_at.is_(None),
            Invite.expires_at > utcnow(),
        )
        .order_by(Invite.id.desc())
    )
    return list(db.session.scalars(stmt))


def create_invite(principal: Principal, email: str, role: str) -> tuple[Invite, str]:
    """A new invitation and its token (the only time the token exists in clear)."""
    principal.require("org.manage")
    email = (email or "").strip().lower()
    if not EMAIL_RE.match(email) or len(email) > 255:
        _problem("email", "Give an email address, like name@example.com.")
    if role not in ROLES:
        _problem("role", f"Choose one of: {', '.join(ROLES)}.")
    if not _may_invite(principal.role, role):
        _problem("role", "Only an owner can invite another owner.")
    already = db.session.scalar(
        select(Membership.id)
        .join(User, User.id == Membership.user_id)
        .where(Membership.org_id == principal.org_id, func.lower(User.email) == email)
    )
    if already is not None:
        _problem("email", f"{email} is already a member.")
    now = utcnow()
    # One live invitation per address: a new one replaces (revokes) the older links.
    replaced = db.session.scalars(
        select(Invite).where(
            Invite.org_id == principal.org_id,
            Invite.email == email,
            Invite.accepted_at.is_(None),
            Invite.revoked_at.is_(None),
        )
    ).all()
    for old in replaced:
        old.revoked_at = now
        record_event(principal, "invite.revoked", "invite", old.id, {"replaced": True})
    token = new_token(TOKEN_PREFIX, 24)
    invite = Invite(
        org_id=principal.org_id,
        email=email,
        role=role,
        token_hash=token_digest(token),
        created_by_id=principal.user_id,
        created_at=now,
        expires_at=now + timedelta(days=INVITE_DAYS),
    )
    return save_new(principal, invite, "member.invited", "invite", {"role": role}), token


def revoke_invite(principal: Principal, invite_id: int) -> Invite:
    """Revoke a pending invitation: its link stops working."""
    principal.require("org.manage")
    return revoke(principal, INVITES, invite_id)


def remove_member(principal: Principal, membership_id: int) -> User:
    """Take someone out of the org (the user it was); their records and pages stay."""
    acting_role = lock_members(principal)
    membership = get_membership(principal, membership_id)
    if membership.user_id == principal.user_id:
        raise ValidationFailed(
            "You cannot remove yourself.",
            [{"field": "member", "message": "Ask another admin to remove you."}],
        )
    # The remover of an owner is an owner too (checked under the lock), so one remains.
    if membership.role == "owner" and acting_role != "owner":
        raise Forbidden("Only an owner can remove an owner.")
    record_event(
        principal,
        "member.removed",
        "membership",
        membership.id,
        {"user_id": membership.user_id, "role": membership.role},
    )
    user = membership.user
    # What they invited others to, they can no longer vouch for.
    db.session.execute(
        update(Invite)
        .where(
            Invite.org_id == principal.org_id,
            Invite.created_by_id == user.id,
            Invite.accepted_at.is_(None),
            Invite.revoked_at.is_(None),
        )
        .values(revoked_at=utcnow())
    )
    db.session.delete(membership)
    db.session.commit()
    return user


# ---- the invitee's side -----------------------------------------------------------------


@dataclass(frozen=True)
class InviteView:
    """What the invitation page needs: the org, the role, and whose account it is for."""

    invite: Invite
    org: Org
    account: User | None  # the account with the invited email, if there is one


def find_invite(token: str) -> InviteView:
    """The live invitation behind a token; ``NotFound`` for anything used, revoked or old."""
    invite = db.session.scalar(select(Invite).where(Invite.token_hash == token_digest(token or "")))
    if (
        invite is None
        or invite.accepted_at is not None
        or invite.revoked_at is not None
        or as_utc(invite.expires_at) <= utcnow()
    ):
        raise NotFound(GONE_MESSAGE)
    if not _may_invite(_role_in(invite.org_id, invite.created_by_id), invite.role):
        # Whoever made it left the org or lost the right to invite with this role.
        raise NotFound(
            "This invitation link is not valid any more: whoever sent it can no longer "
            "invite to this organization. Ask for a new one."
        )
    account = db.session.scalar(select(User).where(func.lower(User.email) == invite.email))
    return InviteView(invite, invite.org, account)


def _role_in(org_id: int, user_id: int | None) -> str | None:
    if user_id is None:
        return None
    return db.session.scalar(
        select(Membership.role).where(Membership.org_id == org_id, Membership.user_id == user_id)
    )


def _may_invite(inviter_role: str | None, role: str) -> bool:
    """Admins invite up to admin; only owners invite owners."""
    if inviter_role is None or "org.manage" not in ROLE_PERMISSIONS[inviter_role]:
        return False
    return role != "owner" or inviter_role == "owner"


def _claim(invite: Invite, user: User) -> Membership:
    """Use the invitation once (a conditional update) and add the membership."""
    claimed = db.session.execute(
        update(Invite)
        .where(
            Invite.id == invite.id,
            Invite.accepted_at.is_(None),
            Invite.revoked_at.is_(None),
        )
        .values(accepted_at=utcnow(), accepted_by_id=user.id)
    ).rowcount
    if claimed != 1:
        db.session.rollback()
        raise Conflict("This invitation was used or revoked a moment ago.")
    membership = db.session.scalar(
        select(Membership).where(Membership.user_id == user.id, Membership.org_id == invite.org_id)
    )
    if membership is None:
        membership = Membership(user_id=user.id, org_id=invite.org_id, role=invite.role)
        db.session.add(membership)
        db.session.flush()
        principal = Principal.for_user(user.id, invite.org_id, invite.role)
        record_event(
            principal, "member.joined", "membership", membership.id, {"invite_id": invite.id}
        )
        notices.member_joined(membership, invite.id)
    db.session.commit()
    return membership


def accept_as(view: InviteView, user: User) -> Membership:
    """Join as an account already proven to be the invitee's (signed in, or password checked)."""
    if user.email.lower() != view.invite.email:
        raise Forbidden(f"This invitation is for {view.invite.email}.")
    return _claim(view.invite, user)


def accept_new_account(view: InviteView, name: str, password: str, method: str) -> Membership:
    """Create the invitee's account with a name and password, and join."""
    if view.account is not None:
        raise Conflict("An account with this email exists: sign in with its password.")
    name = (name or "").strip()
    problems = []
    if not name or len(name) > 120:
        problems.append({"field": "name", "message": "Give your name (1-120 characters)."})
    elif unsafe_in_one_line(name):  # shown on one line beside everything the person does
        problems.append({"field": "name", "message": ONE_LINE_RULE})
    problems += password_problems(password)
    if problems:
        raise ValidationFailed("Check the form.", problems)
    user = User(email=view.invite.email, name=name, password_hash=hash_password(password, method))
    db.session.add(user)
    try:
        db.session.flush()
    except IntegrityError:  # the same link, submitted twice at once
        db.session.rollback()
        raise Conflict("An account with this email was created a moment ago.") from None
    return _claim(view.invite, user)
