"""Prompts an org's admins saved, offered by every new conversation

Revision ID: 0026_prompts
Revises: 0024_search
Create Date: 2026-12-03 11:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0026_prompts"
down_revision = "0024_search"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "org_prompts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("text", sa.String(length=500), nullable=False),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["created_by_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("org_prompts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_org_prompts_org_id"), ["org_id"], unique=False)


def downgrade():
    with op.batch_alter_table("org_prompts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_org_prompts_org_id"))
    op.drop_table("org_prompts")
