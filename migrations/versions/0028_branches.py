"""chat: branches of a conversation (Regenerate, Edit): each message's parent, and the
conversation's active head (both empty until a conversation first branches)

Revision ID: 0028_branches
Revises: 0027_feedback
Create Date: 2026-12-03 14:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0028_branches"
down_revision = "0027_feedback"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table(
        "chat_conversations", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.add_column(sa.Column("head_id", sa.Integer(), nullable=True))
    with op.batch_alter_table(
        "chat_messages", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            "fk_chat_messages_parent_id_chat_messages",
            "chat_messages",
            ["parent_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade():
    with op.batch_alter_table(
        "chat_messages", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_constraint("fk_chat_messages_parent_id_chat_messages", type_="foreignkey")
        batch_op.drop_column("parent_id")
    with op.batch_alter_table(
        "chat_conversations", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_column("head_id")
