"""Roles, permissions and the principal every service acts as."""

from __future__ import annotations

from dataclasses import dataclass, field
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
# An automation acts for the org on records only: it reads every record (private ones too,
# like the admins who write automations) and creates or updates them, in its own org.
_AUTOMATION = frozenset(
    {"records.view", "records.view_private", "records.create", "records.update"}
)

ROLE_PERMISSIONS: dict[str, frozenset[str]] = {
    "owner": _ADMIN,
    "admin": _ADMIN,
    "member": frozenset(_MEMBER),
    "viewer": _VIEWER,
}


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

    @classmethod
    def for_user(cls, user_id: int, org_id: int, role: str) -> Principal:
        """A principal for a signed-in user acting directly."""
        return cls(
            org_id=org_id,
            role=role,
            actor_kind="user",
            actor_id=user_id,
            user_id=user_id,
            permissions=ROLE_PERMISSIONS.get(role, frozenset()),
        )

    @classmethod
    def for_api_key(cls, key_id: int, org_id: int, role: str) -> Principal:
        """A principal for an API key, with the role chosen when the key was made."""
        return cls(
            org_id=org_id,
            role=role,
            actor_kind="api_key",
            actor_id=key_id,
            permissions=ROLE_PERMISSIONS.get(role, frozenset()),
        )

    @classmethod
    def for_automation(cls, automation_id: int, org_id: int) -> Principal:
        """The principal an automation's actions run as: no user, records rights only."""
        return cls(
            org_id=org_id,
            role="automation",
            actor_kind="automation",
            actor_id=automation_id,
            permissions=_AUTOMATION,
        )

    def via_assistant(self, conversation_id: int) -> Principal:
        """The same user, acting through the assistant in one conversation."""
        return Principal(
            org_id=self.org_id,
            role=self.role,
            actor_kind="assistant",
            actor_id=self.actor_id,
            user_id=self.user_id,
            conversation_id=conversation_id,
            permissions=self.permissions,
        )

    def can(self, permission: str) -> bool:
        """Whether the role grants ``permission``."""
        return permission in self.permissions

    def require(self, permission: str) -> None:
        """Raise ``Forbidden`` unless the role grants ``permission``."""
        if permission not in self.permissions:
            raise Forbidden(f"Your role ({self.role}) lacks the {permission} permission.")
