"""The approvals' own table: allowances ("Allow <tool> for this conversation")."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from monark.core.models import utcnow
from monark.extensions import db


class Allowance(db.Model):
    """ "Allow <tool> for this conversation": later calls of that tool in that conversation,
    by that user, on the same target where the tool has one (``scope``), run without a card
    while the allowance holds (not revoked, and the conversation active within
    ``CHAT_ALLOWANCE_IDLE``)."""

    __tablename__ = "chat_allowances"
    __table_args__ = (Index("ix_chat_allowances_conversation_id_tool", "conversation_id", "tool"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("chat_conversations.id", ondelete="CASCADE")
    )
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    tool: Mapped[str] = mapped_column(String(120))
    # The one target it covers, for a tool that declares one (``RouteDescriptor.allow_scope``: a
    # record tool's model key); None: the tool as a whole.
    scope: Mapped[str | None] = mapped_column(String(120), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
