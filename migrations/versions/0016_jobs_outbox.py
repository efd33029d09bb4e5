"""Automations on the job queue: events are the outbox, a run is claimed once per event

Revision ID: 0016_jobs_outbox
Revises: 0015_api_holds
Create Date: 2026-12-02 14:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0016_jobs_outbox"
down_revision = "0015_api_holds"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}


def upgrade():
    # Events already written ran their automations in their request: none is pending.
    with op.batch_alter_table("events", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.add_column(
            sa.Column("pending", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.create_index(
            "ix_events_pending",
            ["id"],
            unique=False,
            sqlite_where=sa.text("pending"),
            postgresql_where=sa.text("pending"),
        )
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.add_column(sa.Column("cascade_event_id", sa.Integer(), nullable=True))
        batch_op.create_index(
            "ix_automation_runs_cascade_event_id", ["cascade_event_id"], unique=False
        )
        batch_op.create_index(
            "uq_automation_runs_automation_id_trigger_event_id",
            ["automation_id", "trigger_event_id"],
            unique=True,
        )


def downgrade():
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.drop_index("uq_automation_runs_automation_id_trigger_event_id")
        batch_op.drop_index("ix_automation_runs_cascade_event_id")
        batch_op.drop_column("cascade_event_id")
    with op.batch_alter_table("events", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.drop_index("ix_events_pending")
        batch_op.drop_column("pending")
