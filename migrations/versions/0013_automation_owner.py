"""automations: an owner whose current rights each run acts within, the reason one was
switched off, and what a private record's events do; a run for a private record names
its readers (private_to) instead of a flag

Revision ID: 0013_automation_owner
Revises: 0012_approvals
Create Date: 2026-12-02 06:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0013_automation_owner"
down_revision = "0012_approvals"
branch_labels = None
depends_on = None

# Batch mode rebuilds the table on SQLite: keep its ids never reused (migration 0005).
AUTOINCREMENT = {"sqlite_autoincrement": True}


def upgrade():
    with op.batch_alter_table("automations", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.add_column(sa.Column("owner_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("disabled_reason", sa.Text(), nullable=True))
        batch_op.add_column(
            sa.Column("private_records", sa.String(length=8), nullable=False, server_default="skip")
        )
        batch_op.create_foreign_key(
            batch_op.f("fk_automations_owner_id_users"),
            "users",
            ["owner_id"],
            ["id"],
            ondelete="SET NULL",
        )
    # Each automation's author owns it; private records trigger nothing until an admin opts in.
    op.execute("UPDATE automations SET owner_id = created_by_id")
    # One whose author is gone or no longer an admin is switched off now, saying why (the
    # roles that may manage automations: monark.core.rbac).
    op.execute(
        "UPDATE automations SET enabled = false, disabled_reason = 'Switched off: its owner "
        "no longer manages automations in this organization. An admin can take ownership "
        "and enable it again.' WHERE enabled = true AND NOT EXISTS (SELECT 1 FROM memberships "
        "WHERE memberships.user_id = automations.owner_id "
        "AND memberships.org_id = automations.org_id "
        "AND memberships.role IN ('owner', 'admin'))"
    )
    with op.batch_alter_table("automations", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.alter_column("private_records", server_default=None)
    # A run for a private record is for its readers alone: who they are, not just whether.
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.add_column(sa.Column("private_to", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE automation_runs SET private_to = COALESCE((SELECT records.creator_id FROM records "
        "WHERE records.id = automation_runs.record_id), 0) WHERE record_private = true"
    )
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.drop_column("record_private")


def downgrade():
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.add_column(
            sa.Column("record_private", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.execute("UPDATE automation_runs SET record_private = true WHERE private_to IS NOT NULL")
    with op.batch_alter_table(
        "automation_runs", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.alter_column("record_private", server_default=None)
        batch_op.drop_column("private_to")
    with op.batch_alter_table("automations", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_automations_owner_id_users"), type_="foreignkey")
        batch_op.drop_column("private_records")
        batch_op.drop_column("disabled_reason")
        batch_op.drop_column("owner_id")
