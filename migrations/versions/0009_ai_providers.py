"""chat: an org's own model provider settings; which provider wrote each message; what a
provider asks to get back with a tool call

Revision ID: 0009_ai_providers
Revises: 0008_tool_call_skipped
Create Date: 2026-12-01 14:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0009_ai_providers"
down_revision = "0008_tool_call_skipped"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "org_ai_settings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=40), nullable=True),
        sa.Column("model", sa.String(length=120), nullable=True),
        sa.Column("api_key_encrypted", sa.Text(), nullable=True),
        sa.Column("base_url", sa.String(length=500), nullable=True),
        sa.Column("max_steps", sa.Integer(), nullable=True),
        sa.Column("max_tokens", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["org_id"], ["orgs.id"], name=op.f("fk_org_ai_settings_org_id_orgs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["updated_by_id"],
            ["users.id"],
            name=op.f("fk_org_ai_settings_updated_by_id_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_org_ai_settings")),
        sa.UniqueConstraint("org_id", name=op.f("uq_org_ai_settings_org_id")),
        sqlite_autoincrement=True,  # as every table (0005)
    )
    with op.batch_alter_table(
        "chat_messages", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.add_column(sa.Column("provider", sa.String(length=40), nullable=True))
    with op.batch_alter_table(
        "chat_tool_calls", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.add_column(sa.Column("provider_meta", sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table(
        "chat_tool_calls", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_column("provider_meta")
    with op.batch_alter_table(
        "chat_messages", schema=None, table_kwargs={"sqlite_autoincrement": True}
    ) as batch_op:
        batch_op.drop_column("provider")
    op.drop_table("org_ai_settings")
