"""Whose rights an automation acts within: its owner's, as they are now.

An automation is owned by its author until an admin takes it over. Each run acts as
``Principal.for_automation`` limited to the owner's current role, and runs only while the
owner may still manage automations in the org (checked at every run). The moment an owner
leaves or loses ``automation.manage``, their automations are switched off in the same
transaction, with a reason stored on the automation and an ``automation.disabled`` event;
an admin can take ownership and enable them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from monark.automations.models import Automation
from monark.core.events import record_event
from monark.core.models import Event, Membership, User, utcnow
from monark.core.rbac import ROLE_PERMISSIONS, Principal
from monark.core.uow import listen_once

MEMBER_EVENTS = ("member.role_changed", "member.removed")
_CHANGED = "monark.automation_owners_changed"


@dataclass(frozen=True)
class Owner:
    """An automation's owner as of now: who, and their role in the org (None: not a member)."""

    user_id: int | None
    name: str | None
    role: str | None

    @property
    def lapse(self) -> str | None:
        """Why this owner can no longer vouch for the automation (an event's reason), or None."""
        if self.user_id is None:
            return "no_owner"
        if self.role is None:
            return "owner_left"
        if "automation.manage" not in ROLE_PERMISSIONS.get(self.role, frozenset()):
            return "owner_lost_rights"
        return None

    def principal(self, org_id: int) -> Principal | None:
        """The owner acting in ``org_id`` with their current role (None: not a member)."""
        if self.user_id is None or self.role is None:
            return None
        return Principal.for_user(self.user_id, org_id, self.role)

    def reason(self, *, past: bool = False) -> str:
        """The lapse in words: as it is now (a refusal), or as it was (why it was switched
        off, which stays true once the owner changes or regains the right)."""
        who = self.name or f"user #{self.user_id}"
        if self.lapse == "no_owner":
            return "It had no owner." if past else "It has no owner."
        if self.lapse == "owner_left":
            return f"Its owner, {who}, left the organization."
        if self.lapse == "owner_lost_rights":
            if past:
                return f"Its owner, {who}, was made a {self.role} (who manages no automations)."
            return f"Its owner, {who}, is now a {self.role} and may no longer manage automations."
        return ""


def owner_of(session: Session, automation: Automation) -> Owner:
    """The automation's owner and their current role in its org."""
    if automation.owner_id is None:
        return Owner(None, None, None)
    row = session.execute(
        select(User.name, Membership.role)
        .outerjoin(
            Membership,
            (Membership.user_id == User.id) & (Membership.org_id == automation.org_id),
        )
        .where(User.id == automation.owner_id)
    ).first()
    if row is None:
        return Owner(automation.owner_id, None, None)
    return Owner(automation.owner_id, row.name, row.role)


def switch_off(automation: Automation, owner: Owner) -> None:
    """Disable an automation whose owner lapsed, saying why (in the caller's transaction)."""
    automation.enabled = False
    automation.disabled_reason = (
        f"Switched off on {utcnow():%Y-%m-%d}: {owner.reason(past=True)} An admin can take "
        "ownership and enable it again."
    )
    record_event(
        Principal.for_automation(automation.id, automation.org_id, None),
        "automation.disabled",
        "automation",
        automation.id,
        {"automation_id": automation.id, "reason": owner.lapse, "owner_id": owner.user_id},
    )


# ---- when a member's rights change -------------------------------------------------------


def _note_member_changes(session: Session, _flush_context: Any) -> None:
    for obj in session.new:
        if isinstance(obj, Event) and obj.type in MEMBER_EVENTS:
            user_id = (obj.payload or {}).get("user_id")
            if isinstance(user_id, int):
                session.info.setdefault(_CHANGED, set()).add((obj.org_id, user_id))


def _switch_off_lapsed(session: Session) -> None:
    if any(isinstance(o, Event) and o.type in MEMBER_EVENTS for o in session.new):
        session.flush()  # before_commit comes before commit's own flush: note those too
    changed = session.info.pop(_CHANGED, None)
    for org_id, user_id in sorted(changed or ()):
        owned = session.scalars(
            select(Automation).where(
                Automation.org_id == org_id,
                Automation.owner_id == user_id,
                Automation.enabled.is_(True),
            )
        ).all()
        for automation in owned:
            owner = owner_of(session, automation)
            if owner.lapse:
                switch_off(automation, owner)


def _forget(session: Session, *_args: Any) -> None:
    session.info.pop(_CHANGED, None)


def install_ownership() -> None:
    """Switch off a member's automations in the transaction that takes their rights away."""
    listen_once(
        Session,
        (
            ("after_flush", _note_member_changes),
            ("before_commit", _switch_off_lapsed),
            ("after_rollback", _forget),
        ),
    )
