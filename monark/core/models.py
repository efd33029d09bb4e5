"""Accounts, organizations, memberships, API keys, invitations and domain events, and the
column shapes most tables share."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any

from flask_login import UserMixin
from sqlalchemy import (
    DDL,
    JSON,
    ForeignKey,
    Index,
    String,
    Table,
    UniqueConstraint,
    event,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from monark.extensions import db

# The largest id an ``Integer`` column holds on PostgreSQL (int4); URLs and API inputs cap ids
# at this, so a larger one is a clean 404 or validation error.
MAX_ID = 2**31 - 1


def create_with(table: Table, sqlite: Iterable[str] = (), postgresql: Iterable[str] = ()) -> None:
    """Run each database's statements (triggers, a companion table) right after ``table`` is
    created, so ``create_all`` builds what the migrations build."""
    for dialect, statements in (("sqlite", sqlite), ("postgresql", postgresql)):
        for sql in statements:
            event.listen(table, "after_create", DDL(sql).execute_if(dialect=dialect))


def utcnow() -> datetime:
    """Timezone-aware now, stored as UTC."""
    return datetime.now(UTC)


def as_utc(value: datetime | None) -> datetime | None:
    """Read a stored datetime as aware UTC (SQLite hands them back naive)."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


# Column shapes most tables share, written ``Mapped[IntPk]`` and so on; a column adds its
# own options with ``= mapped_column(...)`` (for example ``index=True``).
IntPk = Annotated[int, mapped_column(primary_key=True)]
# The org a row belongs to: it goes with its org.
OrgId = Annotated[int, mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))]
# A user a row names (its creator, say): the row stays, with null, when the user goes.
UserRef = Annotated[int | None, mapped_column(ForeignKey("users.id", ondelete="SET NULL"))]
CreatedAt = Annotated[datetime, mapped_column(default=utcnow)]
UpdatedAt = Annotated[datetime, mapped_column(default=utcnow, onupdate=utcnow)]


class User(UserMixin, db.Model):
    __tablename__ = "users"

    id: Mapped[IntPk]
    email: Mapped[str] = mapped_column(String(255), unique=True)
    name: Mapped[str] = mapped_column(String(120))
    password_hash: Mapped[str] = mapped_column(String(255))
    ai_agent_enabled: Mapped[bool] = mapped_column(default=True)
    assistant_panel_width: Mapped[int | None] = mapped_column(default=None)
    # Raised when the password changes or is reset: a session signed in under another
    # version is no longer signed in (``get_id`` carries it into every session).
    session_version: Mapped[int] = mapped_column(server_default=text("0"))
    # The IANA zone the user reads times in (``core.zones``); None: their org's default.
    time_zone: Mapped[str | None] = mapped_column(String(64), default=None)
    # Two-factor sign-in (``core/two_factor.py``): the TOTP secret, encrypted at rest (none:
    # off), and the last time step a code was accepted for, so no code works twice.
    totp_secret: Mapped[str | None] = mapped_column(String(255), default=None)
    totp_last_step: Mapped[int | None] = mapped_column(default=None)
    two_factor_since: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[CreatedAt]

    memberships: Mapped[list[Membership]] = relationship(
        back_populates="user", cascade="all, delete-orphan"
    )

    def get_id(self) -> str:
        """What Flask-Login keeps in the session: the id and the session version."""
        return f"{self.id}:{self.session_version}"

    @property
    def two_factor(self) -> bool:
        """Whether signing in asks for a code after the password."""
        return self.totp_secret is not None


class RecoveryCode(db.Model):
    """One of a user's one-time recovery codes (its digest), for a lost authenticator."""

    __tablename__ = "recovery_codes"

    id: Mapped[IntPk]
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    code_hash: Mapped[str] = mapped_column(String(64))
    used_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[CreatedAt]


class UserSession(db.Model):
    """A signed-in browser session: its cookie names it by a random token (stored here as a
    digest), so it can be listed and signed out from another session (``core/sessions.py``)."""

    __tablename__ = "user_sessions"

    id: Mapped[IntPk]
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_agent: Mapped[str] = mapped_column(String(300), default="")
    ip: Mapped[str | None] = mapped_column(String(64), default=None)
    created_at: Mapped[CreatedAt]
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Org(db.Model):
    __tablename__ = "orgs"

    id: Mapped[IntPk]
    name: Mapped[str] = mapped_column(String(120))
    slug: Mapped[str] = mapped_column(String(60), unique=True)
    chat_enabled: Mapped[bool] = mapped_column(default=True)
    ai_agent_enabled: Mapped[bool] = mapped_column(default=True)
    branding_enabled: Mapped[bool] = mapped_column(default=False)
    assistant_name: Mapped[str | None] = mapped_column(String(60), default=None)
    # Approvals of the assistant's writes: whether "Allow <tool> for this conversation" is
    # offered at all; tools whose every call asks (never allowed); tools whose writes need
    # another member's approval (four eyes). Tool names, as the assistant knows them.
    chat_allowances_enabled: Mapped[bool] = mapped_column(default=True)
    chat_always_confirm: Mapped[list[str]] = mapped_column(JSON, default=list)
    chat_four_eyes: Mapped[list[str]] = mapped_column(JSON, default=list)
    # The IANA zone of the org's schedules and of members who set none (``core.zones``).
    # Server-side only: a row written with the columns of an older schema still inserts.
    time_zone: Mapped[str] = mapped_column(String(64), server_default="UTC")
    # Owners and admins must sign in with two factors to use this org (members need not).
    # (A server default alone, as ``users.session_version``: inserts written for older
    # revisions, which name no such column, still work.)
    require_two_factor: Mapped[bool] = mapped_column(server_default=false())
    created_at: Mapped[CreatedAt]

    memberships: Mapped[list[Membership]] = relationship(
        back_populates="org", cascade="all, delete-orphan"
    )


class Membership(db.Model):
    __tablename__ = "memberships"
    __table_args__ = (UniqueConstraint("user_id", "org_id"),)

    id: Mapped[IntPk]
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    org_id: Mapped[OrgId] = mapped_column(index=True)
    role: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[CreatedAt]

    user: Mapped[User] = relationship(back_populates="memberships")
    org: Mapped[Org] = relationship(back_populates="memberships")


class RoleGrant:
    """What API keys and invitations share: a role in an org, handed out by a member as a
    secret (stored as its digest) that works until it is revoked."""

    id: Mapped[IntPk]
    org_id: Mapped[OrgId] = mapped_column(index=True)
    role: Mapped[str] = mapped_column(String(20))
    created_by_id: Mapped[UserRef]
    created_at: Mapped[CreatedAt]
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)

    @property
    def revocable(self) -> bool:
        """Not revoked yet."""
        return self.revoked_at is None


class Invite(RoleGrant, db.Model):
    """An invitation to join an org with a role: a one-time link."""

    __tablename__ = "invites"

    email: Mapped[str] = mapped_column(String(255))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    expires_at: Mapped[datetime] = mapped_column()
    accepted_at: Mapped[datetime | None] = mapped_column(default=None)
    accepted_by_id: Mapped[UserRef] = mapped_column(default=None)

    org: Mapped[Org] = relationship()
    created_by: Mapped[User | None] = relationship(foreign_keys="Invite.created_by_id")

    @property
    def revocable(self) -> bool:
        """Neither used nor revoked yet (an expired one may still be revoked)."""
        return self.accepted_at is None and self.revoked_at is None


class ApiKey(RoleGrant, db.Model):
    """A key for the API (and MCP), acting with its role, never above its creator's."""

    __tablename__ = "api_keys"

    name: Mapped[str] = mapped_column(String(120))
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    # Its writes wait for a member's approval in the Approvals inbox (202 Accepted) instead
    # of running. New keys have it on; keys made before it existed keep running their writes.
    writes_need_approval: Mapped[bool] = mapped_column(default=False)

    created_by: Mapped[User | None] = relationship()


class Event(db.Model):
    """A domain event: one row per mutation, written in the mutation's transaction."""

    __tablename__ = "events"
    __table_args__ = (
        Index("ix_events_org_id_id", "org_id", "id"),
        Index("ix_events_org_id_type", "org_id", "type"),
        Index(
            "ix_events_pending",
            "id",
            sqlite_where=text("pending"),
            postgresql_where=text("pending"),
        ),
    )

    id: Mapped[IntPk]
    org_id: Mapped[OrgId]
    type: Mapped[str] = mapped_column(String(60))
    actor_kind: Mapped[str] = mapped_column(String(20))
    actor_id: Mapped[int | None] = mapped_column()
    on_behalf_of_id: Mapped[int | None] = mapped_column()
    conversation_id: Mapped[int | None] = mapped_column()
    subject_type: Mapped[str] = mapped_column(String(40))
    subject_id: Mapped[int | None] = mapped_column()
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The outbox: a feature acts on this event after commit (``events.follow``), and has
    # not yet. Cleared when that work is done; the sweep finds what a lost job left.
    pending: Mapped[bool] = mapped_column(default=False)
    # How often a sweep took it up: one whose work keeps failing is given up at a cap.
    sweeps: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[CreatedAt]
