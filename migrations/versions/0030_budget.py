"""Budgets: an org's total of each day (usage_org_days), kept by triggers on the day rows

Revision ID: 0030_budget
Revises: 0029_record_scale
Create Date: 2026-12-03 14:30:00

"""

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0030_budget"
down_revision = "0029_record_scale"
branch_labels = None
depends_on = None

# Money (``monark.core.money``): exact Numeric, or an integer of 1e-10 units on SQLite.
MONEY = sa.Numeric(precision=20, scale=10).with_variant(sa.BigInteger(), "sqlite")

# The statements of ``monark.settings.models`` (SQLITE_ORG_DAY_DDL, POSTGRES_ORG_DAY_DDL),
# as they were at this revision.
_ADD = (
    "INSERT INTO usage_org_days (org_id, day, cost, unpriced_tokens)"
    " VALUES (new.org_id, new.day, new.cost, new.unpriced_tokens)"
    " ON CONFLICT (org_id, day) DO UPDATE SET cost = usage_org_days.cost + excluded.cost,"
    " unpriced_tokens = usage_org_days.unpriced_tokens + excluded.unpriced_tokens;"
)
_TAKE = (
    "UPDATE usage_org_days SET cost = cost - old.cost,"
    " unpriced_tokens = unpriced_tokens - old.unpriced_tokens"
    " WHERE org_id = old.org_id AND day = old.day;"
)
_SAME_KEY = "new.org_id = old.org_id AND new.day = old.day"
SQLITE_DDL = (
    f"CREATE TRIGGER chat_usage_days_org_ai AFTER INSERT ON chat_usage_days BEGIN {_ADD} END",
    "CREATE TRIGGER chat_usage_days_org_au AFTER UPDATE OF cost, unpriced_tokens"
    f" ON chat_usage_days WHEN {_SAME_KEY} BEGIN"
    " UPDATE usage_org_days SET cost = cost + new.cost - old.cost,"
    " unpriced_tokens = unpriced_tokens + new.unpriced_tokens - old.unpriced_tokens"
    " WHERE org_id = new.org_id AND day = new.day; END",
    "CREATE TRIGGER chat_usage_days_org_am AFTER UPDATE OF org_id, day, cost, unpriced_tokens"
    f" ON chat_usage_days WHEN NOT ({_SAME_KEY}) BEGIN {_TAKE} {_ADD} END",
    f"CREATE TRIGGER chat_usage_days_org_ad AFTER DELETE ON chat_usage_days BEGIN {_TAKE} END",
)
POSTGRES_DDL = (
    "CREATE OR REPLACE FUNCTION usage_org_days_count() RETURNS trigger LANGUAGE plpgsql AS $$"
    " BEGIN"
    " IF TG_OP = 'UPDATE' AND NEW.org_id = OLD.org_id AND NEW.day = OLD.day THEN"
    " UPDATE usage_org_days SET cost = cost + NEW.cost - OLD.cost,"
    " unpriced_tokens = unpriced_tokens + NEW.unpriced_tokens - OLD.unpriced_tokens"
    " WHERE org_id = NEW.org_id AND day = NEW.day;"
    " RETURN NULL;"
    " END IF;"
    f" IF TG_OP <> 'INSERT' THEN {_TAKE.replace('old.', 'OLD.')} END IF;"
    f" IF TG_OP <> 'DELETE' THEN {_ADD.replace('new.', 'NEW.')} END IF;"
    " RETURN NULL;"
    " END $$",
    "CREATE TRIGGER chat_usage_days_org_days"
    " AFTER INSERT OR DELETE OR UPDATE OF org_id, day, cost, unpriced_tokens"
    " ON chat_usage_days FOR EACH ROW EXECUTE FUNCTION usage_org_days_count()",
)


def upgrade():
    op.create_table(
        "usage_org_days",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("org_id", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("cost", MONEY, nullable=False),
        sa.Column("unpriced_tokens", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["org_id"], ["orgs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("org_id", "day"),
        sqlite_autoincrement=True,
    )
    conn = op.get_bind()
    # The totals of the day rows so far, then the triggers (in one transaction on
    # PostgreSQL: no reply is counted between the two).
    op.execute(
        "INSERT INTO usage_org_days (org_id, day, cost, unpriced_tokens)"
        " SELECT org_id, day, SUM(cost), SUM(unpriced_tokens) FROM chat_usage_days"
        " GROUP BY org_id, day"
    )
    for sql in SQLITE_DDL if conn.dialect.name == "sqlite" else POSTGRES_DDL:
        op.execute(sql)


def downgrade():
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        for name in ("ai", "au", "am", "ad"):
            op.execute(f"DROP TRIGGER IF EXISTS chat_usage_days_org_{name}")
    else:
        op.execute("DROP TRIGGER IF EXISTS chat_usage_days_org_days ON chat_usage_days")
        op.execute("DROP FUNCTION IF EXISTS usage_org_days_count()")
    op.drop_table("usage_org_days")
