"""chat: a renewable lease for the running turn, and Stop from any instance

Revision ID: 0007_turn_lease
Revises: 0006_conversation_turn
Create Date: 2026-12-01 09:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0007_turn_lease"
down_revision = "0006_conversation_turn"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table(
        "chat_conversations", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.add_column(sa.Column("turn_id", sa.String(length=32), nullable=True))
        batch_op.add_column(
            sa.Column("turn_lease_until", sa.DateTime(timezone=True), nullable=True)
        )
        batch_op.add_column(
            sa.Column(
                "turn_stop_requested", sa.Boolean(), nullable=False, server_default=sa.false()
            )
        )
        batch_op.create_index("ix_chat_conversations_turn_id", ["turn_id"], unique=False)


def downgrade():
    # Dropping a column rebuilds the table on SQLite: keep its AUTOINCREMENT (0005).
    with op.batch_alter_table(
        "chat_conversations", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_index("ix_chat_conversations_turn_id")
        batch_op.drop_column("turn_stop_requested")
        batch_op.drop_column("turn_lease_until")
        batch_op.drop_column("turn_id")
