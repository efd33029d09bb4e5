"""The settings feature's own tables: which model an org talks to, its budget for the
assistant's spend, what its replies used each day, and its past days' tool calls."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import JSON, BigInteger, Date, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from monark.core.models import utcnow
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
