"""Notifications and each person's mail preferences for them.

A notification stores ids and its kind only, never a title: what it says is drawn when it
is read, with the reader's rights then (``monark.notifications.kinds``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from monark.core.models import CreatedAt, IntPk, OrgId, UserRef
from monark.extensions import db


class Notification(db.Model):
    """One thing a member of one org should hear of: its kind, what it is about (ids),
    who set it off, whether they read it, and how it goes by mail."""

    __tablename__ = "notifications"
    __table_args__ = (
        # The bell's count and the list: a member's notifications of one org, newest first.
        Index("ix_notifications_org_id_user_id_id", "org_id", "user_id", "id"),
        # The mail sweep and the digest: what still waits to be mailed.
        Index("ix_notifications_mail_mailed_at", "mail", "mailed_at"),
    )

    id: Mapped[IntPk]
    org_id: Mapped[OrgId]
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(40))
    subject_type: Mapped[str] = mapped_column(String(40))
    subject_id: Mapped[int | None] = mapped_column(default=None)
    actor_id: Mapped[UserRef] = mapped_column(default=None)
    # Ids and numbers only (a threshold, a period, a count), never text of a record.
    data: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # "now", "digest" or "never", as the recipient's preference said when it was made.
    mail: Mapped[str] = mapped_column(String(8), default="never")
    mailed_at: Mapped[datetime | None] = mapped_column(default=None)
    read_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[CreatedAt]


class NotificationPreference(db.Model):
    """How one person wants one kind by mail (no row: the kind's default)."""

    __tablename__ = "notification_preferences"
    __table_args__ = (
        Index("uq_notification_preferences_user_id_kind", "user_id", "kind", unique=True),
    )

    id: Mapped[IntPk]
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(40))
    delivery: Mapped[str] = mapped_column(String(8))
