"""The wiki's one table: pages in a tree, ordered among their siblings."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from monark.core.models import CreatedAt, IntPk, OrgId, UpdatedAt, UserRef
from monark.extensions import db


class WikiPage(db.Model):
    __tablename__ = "wiki_pages"
    # The tree is read per org; siblings are ordered by position.
    __table_args__ = (Index("ix_wiki_pages_org_id_parent_id", "org_id", "parent_id", "position"),)

    id: Mapped[IntPk]
    org_id: Mapped[OrgId]
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("wiki_pages.id", ondelete="CASCADE"), default=None
    )
    title: Mapped[str] = mapped_column(String(200))
    icon: Mapped[str] = mapped_column(String(32), default="")
    position: Mapped[int] = mapped_column(default=0)
    body: Mapped[str] = mapped_column(Text, default="")
    archived: Mapped[bool] = mapped_column(default=False)
    created_by_id: Mapped[UserRef]
    updated_by_id: Mapped[UserRef]
    created_at: Mapped[CreatedAt]
    updated_at: Mapped[UpdatedAt]
