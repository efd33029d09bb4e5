"""The settings feature's own tables: which model an org talks to, its budget for the
assistant's spend, what its replies used each day (and the org's total of each day, kept
by the database), and its past days' tool calls."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import (
    JSON,
    BigInteger,
    Date,
    ForeignKey,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from monark.core.models import create_with, utcnow
from monark.core.money import Money
from monark.extensions import db


class OrgAiSettings(db.Model):
    """An org's own model provider: unset fields fall back to the deployment's environment.

    The key is encrypted at rest (``core.crypto``) and never shown again once saved.
    """

    __tablename__ = "org_ai_settings"

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), unique=True)
    provider: Mapped[str | None] = mapped_column(String(40), default=None)
    model: Mapped[str | None] = mapped_column(String(120), default=None)
    api_key_encrypted: Mapped[str | None] = mapped_column(Text, default=None)
    base_url: Mapped[str | None] = mapped_column(String(500), default=None)
    max_steps: Mapped[int | None] = mapped_column(default=None)
    max_tokens: Mapped[int | None] = mapped_column(default=None)
    # The org's own price of its model (input, output, cache_write, cache_read per million
    # tokens, as strings), over the price table; None: the table's.
    prices: Mapped[dict[str, str] | None] = mapped_column(JSON, default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    updated_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )


class OrgBudget(db.Model):
    """What an org may spend a calendar month (UTC), and each member a day; unset fields
    fall back to the deployment's defaults. ``warned``/``tripped`` name the last period
    whose 80% and 100% marks were crossed, so each is audited once per period."""

    __tablename__ = "org_budgets"

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), unique=True)
    monthly_cost: Mapped[Decimal | None] = mapped_column(Money(), default=None)
    monthly_tokens: Mapped[int | None] = mapped_column(BigInteger, default=None)
    user_daily_cost: Mapped[Decimal | None] = mapped_column(Money(), default=None)
    user_daily_tokens: Mapped[int | None] = mapped_column(BigInteger, default=None)
    warned_period: Mapped[str | None] = mapped_column(String(7), default=None)  # "2026-12"
    tripped_period: Mapped[str | None] = mapped_column(String(7), default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    updated_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )


class ToolDay(db.Model):
    """An org's tool calls of one past day, by tool and status, kept once the day's calls
    can no longer change status (older than the approval TTL): the usage page reads these
    instead of every call. A row with an empty ``name`` marks a day kept with no calls."""

    __tablename__ = "usage_tool_days"
    __table_args__ = (UniqueConstraint("org_id", "day", "name", "status"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    day: Mapped[date] = mapped_column(Date)
    name: Mapped[str] = mapped_column(String(120))
    status: Mapped[str] = mapped_column(String(12))
    calls: Mapped[int] = mapped_column(default=0)


NO_USER = 0  # a reply nobody asked for by name (the key's conversations): kept apart


class UsageDay(db.Model):
    """What an org's replies used one day (UTC), per user and model, added to by each
    reply as it is stored (``settings.metering``); the table keeps its first name."""

    __tablename__ = "chat_usage_days"
    __table_args__ = (UniqueConstraint("org_id", "day", "user_id", "provider", "model"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    day: Mapped[date] = mapped_column(Date)  # UTC
    # No foreign key: a user who leaves keeps the org's history (and NULL breaks the key).
    user_id: Mapped[int] = mapped_column(default=NO_USER)
    provider: Mapped[str] = mapped_column(String(40), default="")
    model: Mapped[str] = mapped_column(String(80), default="")
    replies: Mapped[int] = mapped_column(default=0)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost: Mapped[Decimal] = mapped_column(Money(), default=Decimal(0))
    unpriced_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    unpriced_replies: Mapped[int] = mapped_column(default=0)


class OrgDay(db.Model):
    """What an org's replies cost one day (UTC), all members and models together: the sums
    of its day rows (``UsageDay``), kept by the database's triggers on them (``*_ORG_DAY_DDL``)
    whoever writes them, so a budget check reads one row a day instead of every member's."""

    __tablename__ = "usage_org_days"
    __table_args__ = (UniqueConstraint("org_id", "day"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"))
    day: Mapped[date] = mapped_column(Date)  # UTC
    cost: Mapped[Decimal] = mapped_column(Money(), default=Decimal(0))
    unpriced_tokens: Mapped[int] = mapped_column(BigInteger, default=0)


# The triggers that keep ``OrgDay`` the sum of the day rows: a reply's upsert changes one
# row, its day's total follows in the same statement (the common case, a row added to on
# its own key, in one statement). The migration (0030_budget) runs the same statements.
# SQLite's batch migrations copy a table without its triggers: one that rebuilds
# chat_usage_days must create these again.
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
SQLITE_ORG_DAY_DDL = (
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
POSTGRES_ORG_DAY_DDL = (
    "CREATE OR REPLACE FUNCTION usage_org_days_count() RETURNS trigger LANGUAGE plpgsql AS $$"
    " BEGIN"
    f" IF TG_OP = 'UPDATE' AND {_SAME_KEY.replace('new.', 'NEW.').replace('old.', 'OLD.')} THEN"
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
create_with(UsageDay.__table__, SQLITE_ORG_DAY_DDL, POSTGRES_ORG_DAY_DDL)


class OrgPrompt(db.Model):
    """A prompt an org's admins saved for everyone: offered by every new conversation."""

    __tablename__ = "org_prompts"

    id: Mapped[int] = mapped_column(primary_key=True)
    org_id: Mapped[int] = mapped_column(ForeignKey("orgs.id", ondelete="CASCADE"), index=True)
    text: Mapped[str] = mapped_column(String(500))
    created_by_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
