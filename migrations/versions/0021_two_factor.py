"""Two-factor sign-in (TOTP, recovery codes, the org's requirement) and a row per session

Revision ID: 0021_two_factor
Revises: 0020_accounts
Create Date: 2026-12-03 10:30:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0021_two_factor"
down_revision = "0020_accounts"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}  # as every table (0005)


def upgrade():
    with op.batch_alter_table("users", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.add_column(sa.Column("totp_secret", sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column("totp_last_step", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("two_factor_since", sa.DateTime(timezone=True), nullable=True)
        )
    with op.batch_alter_table("orgs", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.add_column(
            sa.Column("require_two_factor", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_table(
        "recovery_codes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("code_hash", sa.String(length=64), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        **AUTOINCREMENT,
    )
    with op.batch_alter_table(
        "recovery_codes", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.create_index("ix_recovery_codes_user_id", ["user_id"], unique=False)
    op.create_table(
        "user_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_agent", sa.String(length=300), nullable=False),
        sa.Column("ip", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
        **AUTOINCREMENT,
    )
    with op.batch_alter_table("user_sessions", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.create_index("ix_user_sessions_user_id", ["user_id"], unique=False)


def downgrade():
    op.drop_table("user_sessions")
    op.drop_table("recovery_codes")
    with op.batch_alter_table("orgs", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.drop_column("require_two_factor")
    with op.batch_alter_table("users", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.drop_column("two_factor_since")
        batch_op.drop_column("totp_last_step")
        batch_op.drop_column("totp_secret")
