"""Roles, permissions and the principal every service acts as."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from monark.core.errors import Forbidden

Role = Literal["owner", "admin", "member", "viewer"]
ActorKind = Literal["user", "api_key", "assistant", "automation"]

ROLES: tuple[Role, ...] = ("owner", "admin", "member", "viewer")

PERMISSIONS: tuple[str, ...] = (
    "records.view",
    "records.view_private",
    "records.create",
    "records.update",
    "records.delete",
    "models.manage",
    "automation.view",
    "automation.create",
    "automation.manage",
    "automation.run",
    "wiki.view",
    "wiki.edit",
    "chat.use",
    "chat.moderate",
    "org.manage",
    "apikeys.manage",
    "audit.view",
)

_VIEWER = frozenset({"records.view", "automation.view", "wiki.view", "chat.use"})
_MEMBER = _VIEWER | {"records.create", "records.update", "records.delete", "wiki.edit"}
_ADMIN = frozenset(PERMISSIONS)
# An automation acts for the org on records only: it reads records and creates or updates
# them, in its own org, and never beyond what its owner's role grants now (``for_automation``).
_AUTOMATION = frozenset(
    {"records.view", "records.view_private", "records.create", "records.update"}
)

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "owner": _ADMIN,
    "admin": _ADMIN,
    "member": frozenset(_MEMBER),
    "viewer": _VIEWER,
}


def roles_up_to(role: str) -> tuple[Role, ...]:
    """``role`` and the roles below it (what its holder may grant); none for a role that is
    not a member's."""
    return ROLES[ROLES.index(role) :] if role in ROLES else ()  # type: ignore[arg-type]


# What a principal may do by its role: a member's, or "automation" (which no member has).
_GRANTS: dict[str, frozenset[str]] = {**ROLE_PERMISSIONS, "automation": _AUTOMATION}


@dataclass(frozen=True)
class Principal:
    """Who is acting, in which org, with which role.

    ``user_id`` is the signed-in person (also for the assistant, which acts on their
    behalf); API keys and automations have no user. ``actor_id`` is the user id, the key id
    or the automation id.
    """

    org_id: int
    role: str
    actor_kind: ActorKind
    actor_id: int
    user_id: int | None = None
    conversation_id: int | None = None
    permissions: frozenset[str] = field(default=frozenset())
    # A write decided by another member than the one who asked for it (the Approvals
    # inbox): who asked (a hand-over), or who approved it (an API key's held write).
    requested_by_id: int | None = None
    approved_by_id: int | None = None
    # An automation run for a private record: whatever it writes may be read only by who
    # may read that record, i.e. private to this creator's id (0: no creator, so only roles
    # with records.view_private). None: not confined.
    confined_to: int | None = None

    @classmethod
    def for_user(cls, user_id: int, org_id: int, role: str) -> Principal:
        """A principal for a signed-in user acting directly."""
        return cls._acting("user", user_id, org_id, role, user_id=user_id)

    @classmethod
    def for_api_key(cls, key_id: int, org_id: int, role: str) -> Principal:
        """A principal for an API key, with the role chosen when the key was made."""
        return cls._acting("api_key", key_id, org_id, role)

    @classmethod
    def for_automation(
        cls,
        automation_id: int,
        org_id: int,
        owner_role: str | None,
        *,
        confined_to: int | None = None,
    ) -> Principal:
        """The principal an automation's actions run as: no user, records rights only, and
        only those its owner's current role (None: no owner) grants too."""
        acting = cls._acting("automation", automation_id, org_id, "automation")
        owner = ROLE_PERMISSIONS.get(owner_role or "", frozenset())
        return replace(acting, permissions=acting.permissions & owner, confined_to=confined_to)

    @classmethod
    def _acting(
        cls,
        actor_kind: ActorKind,
        actor_id: int,
        org_id: int,
        role: str,
        user_id: int | None = None,
    ) -> Principal:
        """A principal with the permissions of ``role`` (none for an unknown one)."""
        return cls(
            org_id=org_id,
            role=role,
            actor_kind=actor_kind,
            actor_id=actor_id,
            user_id=user_id,
            permissions=_GRANTS.get(role, frozenset()),
        )

    def via_assistant(self, conversation_id: int) -> Principal:
        """The same user, acting through the assistant in one conversation."""
        return replace(self, actor_kind="assistant", conversation_id=conversation_id)

    def on_request_of(self, user_id: int | None) -> Principal:
        """The same principal, deciding a write that ``user_id`` asked for."""
        return replace(self, requested_by_id=user_id)

    def approved_by(self, user_id: int | None) -> Principal:
        """The same principal, running a write that member ``user_id`` approved."""
        return replace(self, approved_by_id=user_id)

    def can(self, permission: str) -> bool:
        """Whether the role grants ``permission``."""
        return permission in self.permissions

    def require(self, permission: str) -> None:
        """Raise ``Forbidden`` unless the role grants ``permission``."""
        if permission not in self.permissions:
            raise Forbidden(f"Your role ({self.role}) lacks the {permission} permission.")
