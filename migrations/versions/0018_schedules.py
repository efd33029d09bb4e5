"""Schedules: a run claims its automation's slot once; runs are pruned by their start

Revision ID: 0018_schedules
Revises: 0017_webhook_deliveries
Create Date: 2026-12-02 18:30:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0018_schedules"
down_revision = "0017_webhook_deliveries"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}


def upgrade():
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.add_column(sa.Column("slot_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(
            "uq_automation_runs_automation_id_slot_at", ["automation_id", "slot_at"], unique=True
        )
        batch_op.create_index("ix_automation_runs_started_at", ["started_at"], unique=False)


def downgrade():
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.drop_index("ix_automation_runs_started_at")
        batch_op.drop_index("uq_automation_runs_automation_id_slot_at")
        batch_op.drop_column("slot_at")
