"""Metering the assistant's replies (``chat.host.Meter``, installed by the factory): each
reply's usage and exact cost stored on it, and counted in its day's row (``UsageDay``, one a
day per org, user and model) in the same transaction as the reply, so the usage page and
budgets read a few rows instead of every reply, and always agree with the stored replies.

A reply with a known cost adds it to ``cost``; one without (a model the price table does
not name, or a provider that reported no usage) adds its tokens to ``unpriced_tokens``.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from sqlalchemy import bindparam, func, select
from sqlalchemy.dialects import postgresql, sqlite

from monark.chat.host import Charge, count_tokens
from monark.chat.models import Message
from monark.core import metrics
from monark.core.models import utcnow
from monark.extensions import db
from monark.settings import budgets
from monark.settings.models import NO_USER, OrgBudget, OrgDay, UsageDay
from monark.settings.prices import Price, cost_of

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


def charge(reply: Charge) -> str | None:
    """Store a reply's usage and cost (unknown without a price or a reported usage), count
    it in its day's row, in the caller's transaction, and say why the spend now pauses the
    principal's assistant (``budgets.checked``), or None. ``reply.price`` and
    ``reply.budget``: what the resolver put in ``ResolvedAi`` (a ``Price``, or None:
    unknown; ``budgets.Limits``, or None: no check)."""
    message, principal, budget = reply.message, reply.principal, reply.budget
    count_tokens(message, reply.usage)
    message.cost = cost_of(reply.price if isinstance(reply.price, Price) else None, reply.usage)
    _count_for_operators(message)
    values = day_values(message, principal.user_id)
    # On the session's connection, in its transaction: the reply's own pending changes need
    # no flush first (the commit writes them), which keeps this to one statement a reply.
    connection = db.session.connection()
    dialect = connection.dialect.name
    if budget is None or not budgets.capped(budget, principal):
        connection.execute(_upsert(dialect), values)
        return None
    today = budgets.current_day()
    # The month's settled days once a turn (kept on the turn's budget), the recent days'
    # rows after every reply: another instance's replies today count at once.
    since, past = budgets.settled(budget, principal.org_id, today)
    params = budgets.check_params(principal, today, since)
    spent = budgets.Spent(values["cost"], values["unpriced_tokens"])
    if dialect == "postgresql":  # one round trip: the day row counted by the check itself
        row = connection.execute(_counted_check(), params | values).first()
    else:  # one statement too: the count, returning the check's sums
        returned = connection.execute(_returning_check(), params | values).one()
    counted = budgets.Reply(values["day"], values["user_id"], spent)
    if dialect != "postgresql":
        row = _without_reply(returned, counted, principal.user_id, today)
    return budgets.checked(principal, row, today, record=True, reply=counted, past=past)


def _count_for_operators(message: Message) -> None:
    """/metrics: the reply's tokens by kind and its cost (every stored reply, summaries too)."""
    provider, model = message.provider or "", message.model or ""
    kinds = {
        "input": message.input_tokens,
        "output": message.output_tokens,
        "cache_read": message.cache_read_tokens,
        "cache_write": message.cache_creation_tokens,
    }
    metrics.tokens(provider, model, kinds)
    metrics.cost(provider, model, message.cost)


class Metering:
    """The host's ``chat.host.Meter``: ``charge`` above."""

    def charge(self, reply: Charge) -> str | None:
        return charge(reply)


def day_values(message: Message, user_id: int | None) -> dict[str, Any]:
    """What one stored reply adds to its day's row, with the row's key."""
    tokens = (
        message.input_tokens
        + message.output_tokens
        + message.cache_read_tokens
        + message.cache_creation_tokens
    )
    cost = message.cost
    return {
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


def _returning_check() -> Any:
    """SQLite's: the day row's upsert ``RETURNING`` the org's budget, its sums since
    ``since`` (its day totals, which the triggers change only after the statement's
    ``RETURNING`` is computed: without the reply), the member's other day rows today (all
    but the reply's own) and the reply's own row as the upsert left it."""
    found = _UPSERTS.get("returning")
    if found is None:
        mine = [
            UsageDay.org_id == bindparam("org"),
            UsageDay.day == bindparam("today"),
            UsageDay.user_id == bindparam("user"),
        ]
        # Not the reply's own row, whichever way SQLite lets a subquery see it: it comes
        # from the row the upsert returns.
        own = (
            (UsageDay.day == bindparam("day"))
            & (UsageDay.provider == bindparam("provider"))
            & (UsageDay.model == bindparam("model"))
        )
        others = [*mine, ~own]
        found = _UPSERTS["returning"] = _upsert("sqlite").returning(
            *(_budget(name) for name in budgets.LIMIT_NAMES),
            _summed(OrgDay.cost, budgets.ORG_SINCE),
            _summed(OrgDay.unpriced_tokens, budgets.ORG_SINCE),
            _summed(UsageDay.cost, others),
            _summed(UsageDay.unpriced_tokens, others),
            UsageDay.cost,
            UsageDay.unpriced_tokens,
        )
    return found


def _budget(name: str) -> Any:
    column = getattr(OrgBudget, name)
    return select(column).where(OrgBudget.org_id == bindparam("org")).scalar_subquery().label(name)


def _summed(column: Any, where: list[Any]) -> Any:
    return select(func.sum(column)).where(*where).scalar_subquery()


def _without_reply(
    row: Any, reply: budgets.Reply, user_id: int | None, today: date
) -> budgets.Sums:
    """``budgets.CHECK``'s row from ``_returning_check``'s: the member's day without the
    reply (``budgets.checked`` adds it), from their other rows and the reply's own."""
    cost, tokens = (value or 0 for value in row[6:8])
    own_cost, own_tokens = row[8:]
    if reply.day == today and reply.user_id == user_id:  # the reply's row is the member's day's
        cost += own_cost - reply.spent.cost
        tokens += own_tokens - reply.spent.unpriced_tokens
    return budgets.Sums(*row[:6], cost, tokens)


def _counted_check() -> Any:
    """``budgets.CHECK`` with the day row's upsert as its ``WITH`` (PostgreSQL runs a
    data-modifying ``WITH`` once, on the check's snapshot: the sums leave the reply out)."""
    found = _UPSERTS.get("check")
    if found is None:
        counted = _upsert("postgresql").returning(UsageDay.id).cte("counted")
        found = _UPSERTS["check"] = budgets.CHECK.add_cte(counted)
    return found
