"""Feedback on the assistant's replies: a thumbs up or down, with an optional reason

Revision ID: 0027_feedback
Revises: 0026_prompts
Create Date: 2026-12-03 11:30:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0027_feedback"
down_revision = "0026_prompts"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "reply_feedback",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("message_id", sa.Integer(), nullable=False),
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("rating", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("provider", sa.String(length=40), nullable=True),
        sa.Column("model", sa.String(length=80), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["message_id"], ["chat_messages.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["conversation_id"], ["chat_conversations.id"], ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("message_id", "user_id"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("reply_feedback", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_reply_feedback_org_id"), ["org_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_reply_feedback_message_id"), ["message_id"], unique=False
        )


def downgrade():
    with op.batch_alter_table("reply_feedback", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_reply_feedback_message_id"))
        batch_op.drop_index(batch_op.f("ix_reply_feedback_org_id"))
    op.drop_table("reply_feedback")
