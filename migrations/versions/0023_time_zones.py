"""Time zones: a user's own (none: the org's), and an org's default (UTC until set)

Revision ID: 0023_time_zones
Revises: 0022_notifications
Create Date: 2026-12-03 10:30:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0023_time_zones"
# Written beside 0021 and 0022 (two-factor, notifications): the merge rechains it.
down_revision = "0022_notifications"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("time_zone", sa.String(length=64), nullable=True))
    with op.batch_alter_table("orgs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("time_zone", sa.String(length=64), nullable=False, server_default="UTC")
        )


def downgrade():
    with op.batch_alter_table("orgs", schema=None) as batch_op:
        batch_op.drop_column("time_zone")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("time_zone")
