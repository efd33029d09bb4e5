"""The settings feature's own table: which model an org talks to."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from monark.core.models import utcnow
from monark.extensions import db


class OrgAiSettings(db.Model):
    """An org's own model provider: unset fields fall back to the deployment's environment.

    The key is encrypted at rest (``core.crypto``) and never shown again once saved.
    """

    __tablename__ = "org_ai_settings"

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), unique=True)
    provider: Mapped[str | None] = mapped_column(String(40), default=None)
    model: Mapped[str | None] = mapped_column(String(120), default=None)
    api_key_encrypted: Mapped[str | None] = mapped_column(Text, default=None)
    base_url: Mapped[str | None] = mapped_column(String(500), default=None)
    max_steps: Mapped[int | None] = mapped_column(default=None)
    max_tokens: Mapped[int | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    updated_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
