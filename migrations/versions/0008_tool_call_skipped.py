"""chat: tool_calls.skipped, so a card a new message skipped is known by a field

Revision ID: 0008_tool_call_skipped
Revises: 0007_turn_lease
Create Date: 2026-12-01 12:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0008_tool_call_skipped"
down_revision = "0007_turn_lease"
branch_labels = None
depends_on = None

# The reason stored on such calls until now (monark.chat.service.AUTO_REJECT_REASON).
AUTO_REJECT_REASON = "The user sent a new message instead of confirming."


def upgrade():
    with op.batch_alter_table(
        "chat_tool_calls", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.add_column(
            sa.Column("skipped", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    calls = sa.table(
        "chat_tool_calls",
        sa.column("skipped", sa.Boolean()),
        sa.column("status", sa.String()),
        sa.column("reject_reason", sa.Text()),
    )
    op.execute(
        calls.update()
        .where(calls.c.status == "REJECTED", calls.c.reject_reason == AUTO_REJECT_REASON)
        .values(skipped=True)
    )


def downgrade():
    with op.batch_alter_table(
        "chat_tool_calls", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_column("skipped")
