"""Accounts: a session version per user, so a password change signs out its other sessions

Revision ID: 0020_accounts
Revises: 0018_schedules
Create Date: 2026-12-03 08:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0020_accounts"
# 0019 (spend) is written in parallel: the merge points this at it.
down_revision = "0019_message_cost"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("session_version", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade():
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("session_version")
