"""Webhooks as jobs: deliveries and their tries, signing secrets, run leases

Revision ID: 0017_webhook_deliveries
Revises: 0016_jobs_outbox
Create Date: 2026-12-02 18:30:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0017_webhook_deliveries"
down_revision = "0016_jobs_outbox"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}


def upgrade():
    with op.batch_alter_table("automations", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.add_column(sa.Column("webhook_secret", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("webhook_secret_previous", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("webhook_secret_previous_until", sa.DateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(
            sa.Column("attempt", sa.Integer(), nullable=False, server_default=sa.text("1"))
        )
        batch_op.add_column(sa.Column("context", sa.JSON(), nullable=True))
    with op.batch_alter_table("events", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.add_column(
            sa.Column("sweeps", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("automation_id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.String(length=64), nullable=False),
        sa.Column("message_id", sa.String(length=40), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("timeout_seconds", sa.Double(), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["automation_id"], ["automations.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["automation_runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("message_id"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.create_index("ix_webhook_deliveries_run_id", ["run_id"], unique=False)
        batch_op.create_index(
            "ix_webhook_deliveries_org_id_status", ["org_id", "status"], unique=False
        )
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("duration_ms", sa.Double(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("response_excerpt", sa.Text(), nullable=True),
        sa.Column("outcome", sa.String(length=12), nullable=False),
        sa.Column("redelivered_by_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["delivery_id"], ["webhook_deliveries.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["redelivered_by_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_webhook_attempts_delivery_id", ["delivery_id"], unique=False)


def downgrade():
    with op.batch_alter_table("webhook_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_attempts_delivery_id")
    op.drop_table("webhook_attempts")
    with op.batch_alter_table("webhook_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_webhook_deliveries_org_id_status")
        batch_op.drop_index("ix_webhook_deliveries_run_id")
    op.drop_table("webhook_deliveries")
    with op.batch_alter_table("events", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.drop_column("sweeps")
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.drop_column("context")
        batch_op.drop_column("attempt")
        batch_op.drop_column("lease_until")
    with op.batch_alter_table("automations", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.drop_column("webhook_secret_previous_until")
        batch_op.drop_column("webhook_secret_previous")
        batch_op.drop_column("webhook_secret")
