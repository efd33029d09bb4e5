"""Tables of the records workspace."""

from __future__ import annotations

import secrets
from typing import Any, Literal

from sqlalchemy import JSON, BigInteger, Float, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from monark.core.models import CreatedAt, IntPk, OrgId, UpdatedAt, User, UserRef
from monark.extensions import db

FIELD_TYPES: tuple[str, ...] = ("text", "long_text", "number", "date", "boolean", "select", "user")
FIELD_TYPE_LABELS = {
    "text": "Text",
    "long_text": "Long text",
    "number": "Number",
    "date": "Date",
    "boolean": "Yes / no",
    "select": "Select",
    "user": "User",
}
Visibility = Literal["org", "private"]


def new_data_version() -> int:
    """A fresh data version: random 63 bits, so no two states of any model (a deleted
    model's id taken again, tables emptied and filled again) ever share one."""
    return secrets.randbits(63)


class RecordModel(db.Model):
    """A user-defined model such as ``tasks``: a named set of typed fields."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("org_id", "key"),)

    id: Mapped[IntPk]
    org_id: Mapped[OrgId] = mapped_column(index=True)
    key: Mapped[str] = mapped_column(String(40))
    name: Mapped[str] = mapped_column(String(80))
    description: Mapped[str] = mapped_column(String(500), default="")
    created_at: Mapped[CreatedAt]
    # Set afresh, in the writing transaction, by every write to the model's records
    # (``records/index.py``), so any instance can tell whether a copy of them is current
    # (``records_query``'s cached sandboxes): equal versions, the same rows.
    data_version: Mapped[int] = mapped_column(BigInteger, default=new_data_version)

    fields: Mapped[list[ModelField]] = relationship(
        back_populates="model",
        cascade="all, delete-orphan",
        order_by="ModelField.position, ModelField.id",
    )


class ModelField(db.Model):
    __tablename__ = "model_fields"
    __table_args__ = (UniqueConstraint("model_id", "key"),)

    id: Mapped[IntPk]
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(40))
    label: Mapped[str] = mapped_column(String(80))
    type: Mapped[str] = mapped_column(String(20))
    required: Mapped[bool] = mapped_column(default=False)
    options: Mapped[list[str]] = mapped_column(JSON, default=list)
    position: Mapped[int] = mapped_column(default=0)

    model: Mapped[RecordModel] = relationship(back_populates="fields")


class Record(db.Model):
    __tablename__ = "records"
    # Listing walks this index newest-first within one model of one org.
    __table_args__ = (Index("ix_records_org_id_model_id_id", "org_id", "model_id", "id"),)

    id: Mapped[IntPk]
    org_id: Mapped[OrgId]
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    values: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    title: Mapped[str] = mapped_column(String(300), default="")
    search_text: Mapped[str] = mapped_column(Text, default="")
    visibility: Mapped[str] = mapped_column(String(10), default="org")
    creator_id: Mapped[UserRef]
    created_at: Mapped[CreatedAt]
    updated_at: Mapped[UpdatedAt]

    creator: Mapped[User | None] = relationship()


# How much of a text value the index keeps: enough to sort and compare, within what a
# PostgreSQL B-tree entry may hold. Longer values are compared whole from ``values``.
TEXT_KEY = 200


class RecordValue(db.Model):
    """One non-empty field value of a record, typed for filtering and sorting.

    Kept in step with ``Record.values`` on every flush (``records/index.py``): text, dates
    and select options lowercased in ``text_value`` (dates are ISO, so they sort as text),
    numbers, booleans and members' ids in ``number_value``. ``private_to`` repeats who may
    see a private record (its creator; NULL for the org's records), so a filtered list is
    answered from these indexes alone. ``model_id`` leads both indexes, so a filter or sort
    on one field of one model reads only that field's entries.
    """

    __tablename__ = "record_values"
    __table_args__ = (
        Index(
            "ix_record_values_text", "model_id", "field", "text_value", "record_id", "private_to"
        ),
        Index(
            "ix_record_values_number",
            "model_id",
            "field",
            "number_value",
            "record_id",
            "private_to",
        ),
        # Rows are found by their key: on SQLite the key is the table (no rowid to go through).
        {"sqlite_with_rowid": False},
    )

    record_id: Mapped[int] = mapped_column(
        ForeignKey("records.id", ondelete="CASCADE"), primary_key=True
    )
    field: Mapped[str] = mapped_column(String(40), primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    text_value: Mapped[str | None] = mapped_column(String(TEXT_KEY))
    number_value: Mapped[float | None] = mapped_column(Float)
    # Not a foreign key: a deleted creator's id is never reused, so their private records
    # stay hidden from everyone but the roles that see all.
    private_to: Mapped[int | None]
