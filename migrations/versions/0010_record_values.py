"""records: a typed index of field values, for lists that filter and sort on any field

Revision ID: 0010_record_values
Revises: 0009_ai_providers
Create Date: 2026-12-01 10:00:00

"""

import json

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0010_record_values"
down_revision = "0009_ai_providers"
branch_labels = None
depends_on = None

TEXT_KEY = 200  # as monark.records.models.TEXT_KEY when this was written


def _key(text):
    # Lowercased, cut, and storable (no lone surrogate, no NUL), as monark.records.index.
    text = text.lower()[:TEXT_KEY].encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.replace("\x00", "\ufffd")


def _rows(record_id, model_id, values, visibility, creator_id):
    # The same rows monark.records.index.index_rows writes, spelled out so this migration
    # keeps meaning what it meant when the app's code changes.
    private = (creator_id or 0) if visibility == "private" else None
    for field, value in (values or {}).items():
        row = {
            "record_id": record_id,
            "field": field,
            "model_id": model_id,
            "text_value": None,
            "number_value": None,
            "private_to": private,
        }
        if isinstance(value, (bool, int, float)):
            yield {**row, "number_value": float(value)}
        elif isinstance(value, str) and value:
            yield {**row, "text_value": _key(value)}


def upgrade():
    table = op.create_table(
        "record_values",
        sa.Column("record_id", sa.Integer(), nullable=False),
        sa.Column("field", sa.String(length=40), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("text_value", sa.String(length=TEXT_KEY), nullable=True),
        sa.Column("number_value", sa.Float(), nullable=True),
        sa.Column("private_to", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["model_id"],
            ["models.id"],
            name=op.f("fk_record_values_model_id_models"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["record_id"],
            ["records.id"],
            name=op.f("fk_record_values_record_id_records"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("record_id", "field", name=op.f("pk_record_values")),
        sqlite_with_rowid=False,
    )
    # Backfill before the indexes (faster), in batches.
    conn = op.get_bind()
    records = sa.table(
        "records",
        sa.column("id", sa.Integer),
        sa.column("model_id", sa.Integer),
        sa.column("values", sa.Text),
        sa.column("visibility", sa.String),
        sa.column("creator_id", sa.Integer),
    )
    batch = []
    # Streamed in chunks (the option on the statement: on the connection it would stay
    # for the DDL below, which PostgreSQL cannot run through a server-side cursor).
    result = conn.execute(
        sa.select(
            records.c.id,
            records.c.model_id,
            records.c["values"],
            records.c.visibility,
            records.c.creator_id,
        ).execution_options(yield_per=5000)
    )
    for record_id, model_id, raw, visibility, creator_id in result:
        values = json.loads(raw) if isinstance(raw, str) else raw
        batch.extend(_rows(record_id, model_id, values, visibility, creator_id))
        if len(batch) >= 5000:
            conn.execute(table.insert(), batch)
            batch = []
    if batch:
        conn.execute(table.insert(), batch)
    op.create_index(
        "ix_record_values_text",
        "record_values",
        ["model_id", "field", "text_value", "record_id", "private_to"],
        unique=False,
    )
    op.create_index(
        "ix_record_values_number",
        "record_values",
        ["model_id", "field", "number_value", "record_id", "private_to"],
        unique=False,
    )


def downgrade():
    op.drop_index("ix_record_values_number", table_name="record_values")
    op.drop_index("ix_record_values_text", table_name="record_values")
    op.drop_table("record_values")
