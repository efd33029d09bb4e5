"""chat: conversations of any length: where old tool results become stubs for the model
(summaries are messages of their own role, which needs no column)

Revision ID: 0011_conversation_summary
Revises: 0010_record_values
Create Date: 2026-12-01 11:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0011_conversation_summary"
down_revision = "0010_record_values"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table(
        "chat_conversations", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.add_column(sa.Column("context_stub_before", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("context_stub_moved_at", sa.Integer(), nullable=True))


def downgrade():
    with op.batch_alter_table(
        "chat_conversations", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_column("context_stub_moved_at")
        batch_op.drop_column("context_stub_before")
