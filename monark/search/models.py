"""The search index's one table: a document per searchable thing, with who may read it."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from monark.core.models import IntPk, OrgId
from monark.extensions import db

# What a document is of; each kind has its own read rule (``services.readable``).
KINDS = ("record", "wiki", "automation", "conversation", "message")


class SearchDocument(db.Model):
    """One searchable thing: its kind and id, its words, and what its read rule needs.

    The words themselves are matched by a full-text index this table carries on each
    database (``index.py`` creates it): on SQLite an FTS5 table over ``title`` and ``body``
    (external content, kept in step by triggers on this table), on PostgreSQL a stored
    ``tsvector`` column with a GIN index. Neither is a column of this model.
    """

    __tablename__ = "search_documents"
    __table_args__ = (
        UniqueConstraint("kind", "object_id"),
        Index("ix_search_documents_org_id_kind", "org_id", "kind"),
    )

    id: Mapped[IntPk]
    org_id: Mapped[OrgId]
    kind: Mapped[str] = mapped_column(String(12))
    object_id: Mapped[int]
    # A record's model (its URL names it; deleting the model deletes its documents).
    model_id: Mapped[int | None] = mapped_column(
        ForeignKey("models.id", ondelete="CASCADE"), default=None
    )
    # A message's conversation (a conversation's own id), so deleting one finds them all.
    parent_id: Mapped[int | None] = mapped_column(default=None)
    # A record's readers as ``records.index.private_to`` (NULL: the org's).
    private_to: Mapped[int | None] = mapped_column(default=None)
    # A conversation's (and its messages') one reader; not a foreign key: a deleted
    # user's id is never reused, so their conversations stay nobody's.
    owner_id: Mapped[int | None] = mapped_column(default=None)
    title: Mapped[str] = mapped_column(String(300), default="")
    body: Mapped[str] = mapped_column(Text, default="")
