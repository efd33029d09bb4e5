"""Spend: each reply's cost, an org's own prices, usage per day, budgets, tool days

Revision ID: 0019_message_cost
Revises: 0018_schedules
Create Date: 2026-12-03 08:00:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0019_message_cost"
down_revision = "0018_schedules"
branch_labels = None
depends_on = None

AUTOINCREMENT = {"sqlite_autoincrement": True}
# Money (``monark.core.money``): exact Numeric, or an integer of 1e-10 units on SQLite.
MONEY = sa.Numeric(precision=20, scale=10).with_variant(sa.BigInteger(), "sqlite")


def upgrade():
    with op.batch_alter_table("chat_messages", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.add_column(sa.Column("cost", MONEY, nullable=True))
    with op.batch_alter_table(
        "org_ai_settings", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.add_column(sa.Column("prices", sa.JSON(), nullable=True))
    with op.batch_alter_table(
        "chat_tool_calls", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.create_index(
            "ix_chat_tool_calls_org_id_created_at",
            ["org_id", "created_at", "name", "status"],
            unique=False,
        )
    op.create_table(
        "chat_usage_days",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(length=40), nullable=False),
        sa.Column("model", sa.String(length=80), nullable=False),
        sa.Column("replies", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_read_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cache_write_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost", MONEY, nullable=False),
        sa.Column("unpriced_tokens", sa.BigInteger(), nullable=False),
        sa.Column("unpriced_replies", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "day", "user_id", "provider", "model"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "org_budgets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("monthly_cost", MONEY, nullable=True),
        sa.Column("monthly_tokens", sa.BigInteger(), nullable=True),
        sa.Column("user_daily_cost", MONEY, nullable=True),
        sa.Column("user_daily_tokens", sa.BigInteger(), nullable=True),
        sa.Column("warned_period", sa.String(length=7), nullable=True),
        sa.Column("tripped_period", sa.String(length=7), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["updated_by_id"], ["users.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id"),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "usage_tool_days",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "day", "name", "status"),
        sqlite_autoincrement=True,
    )
    # The replies stored so far, counted once (their cost was never kept: unknown).
    day = (
        "date(m.created_at)"
        if op.get_bind().dialect.name == "sqlite"
        else "CAST(m.created_at AS DATE)"
    )
    tokens = "m.input_tokens + m.output_tokens + m.cache_read_tokens + m.cache_creation_tokens"
    op.execute(
        f"""
        INSERT INTO chat_usage_days (org_id, day, user_id, provider, model, replies,
            input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost,
            unpriced_tokens, unpriced_replies)
        SELECT m.org_id, {day}, COALESCE(c.creator_id, 0), COALESCE(m.provider, ''),
            COALESCE(m.model, ''), COUNT(*), SUM(m.input_tokens), SUM(m.output_tokens),
            SUM(m.cache_read_tokens), SUM(m.cache_creation_tokens), 0, SUM({tokens}), COUNT(*)
        FROM chat_messages m JOIN chat_conversations c ON c.id = m.conversation_id
        WHERE m.role IN ('assistant', 'summary')
        GROUP BY m.org_id, {day}, COALESCE(c.creator_id, 0), COALESCE(m.provider, ''),
            COALESCE(m.model, '')
        """
    )


def downgrade():
    op.drop_table("usage_tool_days")
    op.drop_table("org_budgets")
    op.drop_table("chat_usage_days")
    with op.batch_alter_table(
        "chat_tool_calls", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.drop_index("ix_chat_tool_calls_org_id_created_at")
    with op.batch_alter_table(
        "org_ai_settings", schema=None, table_kwargs=AUTOINCREMENT
    ) as batch_op:
        batch_op.drop_column("prices")
    with op.batch_alter_table("chat_messages", schema=None, table_kwargs=AUTOINCREMENT) as batch_op:
        batch_op.drop_column("cost")
