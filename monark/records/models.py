"""Tables of the records workspace."""

from __future__ import annotations

import secrets
from typing import Any, Literal

from sqlalchemy import (
    JSON,
    BigInteger,
    Float,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from monark.core.models import CreatedAt, IntPk, OrgId, UpdatedAt, User, UserRef, create_with
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
    # Set afresh, in the writing transaction, by every write to the model's records (the
    # database's triggers on them, ``*_DATA_VERSION_DDL``), so any instance can tell whether
    # a copy of them is current (``records_query``'s cached sandboxes): equal versions, the
    # same rows.
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


# The triggers that give a model a new ``data_version`` whenever a statement inserts,
# changes or deletes any of its records, whoever writes them (the ORM, a bulk statement, a
# COPY, another process's raw SQL): random 63 bits, as ``new_data_version``. The migration
# (0031_data_version_trigger) runs the same statements. SQLite's batch migrations copy a
# table without its triggers: one that rebuilds records must create these again.
_SQLITE_NEW_VERSION = "random() & 9223372036854775807"
SQLITE_DATA_VERSION_DDL = (
    "CREATE TRIGGER records_data_version_ai AFTER INSERT ON records BEGIN"
    f" UPDATE models SET data_version = {_SQLITE_NEW_VERSION} WHERE id = new.model_id; END",
    # Any column counts (a title, a creator), and a record moved changes both models.
    "CREATE TRIGGER records_data_version_au AFTER UPDATE ON records BEGIN"
    f" UPDATE models SET data_version = {_SQLITE_NEW_VERSION}"
    " WHERE id IN (old.model_id, new.model_id); END",
    "CREATE TRIGGER records_data_version_ad AFTER DELETE ON records BEGIN"
    f" UPDATE models SET data_version = {_SQLITE_NEW_VERSION} WHERE id = old.model_id; END",
)
# PostgreSQL: once per statement, over the models its rows belong to (a COPY of a million
# rows updates each model once, not a million times). Rows locked lowest id first: one
# order for every writer. A UUID's first 64 bits, less the sign: gen_random_uuid is core.
_PG_NEW_VERSION = (
    "(('x' || translate(gen_random_uuid()::text, '-', ''))::bit(64)::bigint & 9223372036854775807)"
)
POSTGRES_DATA_VERSION_DDL = (
    "CREATE OR REPLACE FUNCTION records_data_version() RETURNS trigger LANGUAGE plpgsql AS $$"
    " DECLARE ids integer[];"
    " BEGIN"
    " IF TG_OP = 'INSERT' THEN"
    " SELECT array_agg(DISTINCT model_id) INTO ids FROM new_rows;"
    " ELSIF TG_OP = 'DELETE' THEN"
    " SELECT array_agg(DISTINCT model_id) INTO ids FROM old_rows;"
    " ELSIF TG_OP = 'UPDATE' THEN"
    " SELECT array_agg(model_id) INTO ids FROM"
    " (SELECT model_id FROM old_rows UNION SELECT model_id FROM new_rows) AS touched;"
    " ELSE"
    " SELECT array_agg(id) INTO ids FROM models;"
    " END IF;"
    " IF cardinality(ids) > 1 THEN"
    " PERFORM 1 FROM models WHERE id = ANY(ids) ORDER BY id FOR UPDATE;"
    " END IF;"
    f" UPDATE models SET data_version = {_PG_NEW_VERSION} WHERE id = ANY(ids);"
    " RETURN NULL;"
    " END $$",
    "CREATE TRIGGER records_data_version_ai AFTER INSERT ON records"
    " REFERENCING NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION records_data_version()",
    "CREATE TRIGGER records_data_version_au AFTER UPDATE ON records"
    " REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION records_data_version()",
    "CREATE TRIGGER records_data_version_ad AFTER DELETE ON records"
    " REFERENCING OLD TABLE AS old_rows"
    " FOR EACH STATEMENT EXECUTE FUNCTION records_data_version()",
    "CREATE TRIGGER records_data_version_at AFTER TRUNCATE ON records"
    " FOR EACH STATEMENT EXECUTE FUNCTION records_data_version()",
)
create_with(Record.__table__, SQLITE_DATA_VERSION_DDL, POSTGRES_DATA_VERSION_DDL)

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
