"""What replies used, per org, day, user and model: one row a day for each, added to in the
same transaction as the reply it counts, so the usage page and budgets read a few rows
instead of every reply, and always agree with the stored replies.

A reply with a known cost adds it to ``cost``; one without (a model the price table does
not name, or a provider that reported no usage) adds its tokens to ``unpriced_tokens``.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import BigInteger, Date, ForeignKey, String, UniqueConstraint, bindparam
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, mapped_column

from monark.chat.llm.prices import Price, cost_of
from monark.chat.llm.types import UsageReport
from monark.core.models import utcnow
from monark.core.money import Money
from monark.extensions import db

if TYPE_CHECKING:
    from monark.chat.models import Message

NO_USER = 0  # a reply nobody asked for by name (the key's conversations): kept apart


class UsageDay(db.Model):
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


# The columns a reply adds to (the rest are its row's key).
SUMMED = (
    "replies",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost",
    "unpriced_tokens",
    "unpriced_replies",
)


def charge(message: Message, usage: UsageReport, price: Price | None, user_id: int | None) -> None:
    """Store a reply's usage and cost (unknown without a price or a reported usage), and
    count it in its day's row, in the caller's transaction."""
    message.input_tokens = usage.input_tokens
    message.output_tokens = usage.output_tokens
    message.cache_read_tokens = usage.cache_read_tokens
    message.cache_creation_tokens = usage.cache_creation_tokens
    message.cost = cost_of(price, usage)
    count_reply(message, user_id)


def count_reply(message: Message, user_id: int | None) -> None:
    """Add one stored reply's usage to its day's row (in the caller's transaction)."""
    tokens = (
        message.input_tokens
        + message.output_tokens
        + message.cache_read_tokens
        + message.cache_creation_tokens
    )
    cost = message.cost
    values = {
        "org_id": message.org_id,
        "day": (message.created_at or utcnow()).date(),
        "user_id": user_id or NO_USER,
        "provider": (message.provider or "")[:40],
        "model": (message.model or "")[:80],
        "replies": 1,
        "input_tokens": message.input_tokens,
        "output_tokens": message.output_tokens,
        "cache_read_tokens": message.cache_read_tokens,
        "cache_write_tokens": message.cache_creation_tokens,
        "cost": cost if cost is not None else Decimal(0),
        "unpriced_tokens": 0 if cost is not None else tokens,
        "unpriced_replies": 0 if cost is not None else 1,
    }
    # On the session's connection, in its transaction: the reply's own pending changes need
    # no flush first (the commit writes them), which keeps this step's cost to one statement.
    connection = db.session.connection()
    connection.execute(_upsert(connection.dialect.name), values)


_KEY = ["org_id", "day", "user_id", "provider", "model"]
_UPSERTS: dict[str, Any] = {}


def _upsert(dialect: str) -> Any:
    """The day row's ``INSERT … ON CONFLICT DO UPDATE`` (adding to it), built once per
    dialect: building it anew for every reply cost more than running it."""
    found = _UPSERTS.get(dialect)
    if found is None:
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        table = UsageDay.__table__
        statement = insert(table).values({name: bindparam(name) for name in [*_KEY, *SUMMED]})
        found = _UPSERTS[dialect] = statement.on_conflict_do_update(
            index_elements=_KEY,
            set_={name: table.c[name] + statement.excluded[name] for name in SUMMED},
        )
    return found
