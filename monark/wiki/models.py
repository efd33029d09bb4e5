"""The wiki's one table: pages in a tree, ordered among their siblings."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from monark.core.models import utcnow
from monark.extensions import db


class WikiPage(db.Model):
    __tablename__ = "wiki_pages"
    # The tree is read per org; siblings are ordered by position.
    __table_args__ = (Index("ix_wiki_pages_org_id_parent_id", "org_id", "parent_id", "position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("wiki_pages.id", ondelete="CASCADE"), default=None
    )
    title: Mapped[str] = mapped_column(String(200))
    icon: Mapped[str] = mapped_column(String(32), default="")
    position: Mapped[int] = mapped_column(default=0)
    body: Mapped[str] = mapped_column(Text, default="")
    archived: Mapped[bool] = mapped_column(default=False)
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    updated_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
